// A store or sink URL with its password replaced by `***`, for messages and logs (one place for the
// engine, the substrates and the CLI). It parses nothing else and never throws.

/**
 * Replaces the password in the userinfo and in a `?password=` parameter. When the userinfo cannot be
 * told apart from the rest, the last `@` ends it: hiding too much beats leaking a password.
 */
export function redactUrlPassword(url: string): string {
  let out = url;
  const schemeEnd = out.indexOf("://");
  if (schemeEnd >= 0) {
    const rest = out.slice(schemeEnd + 3);
    const at = rest.lastIndexOf("@");
    const colon = at < 0 ? -1 : rest.slice(0, at).indexOf(":");
    if (colon >= 0) out = `${out.slice(0, schemeEnd + 3)}${rest.slice(0, colon)}:***${rest.slice(at)}`;
  }
  return out.replace(/([?&]password=)[^&#]*/gi, "$1***");
}
