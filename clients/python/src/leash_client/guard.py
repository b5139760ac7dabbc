# @guard(client, tool_name=…): @leash/client's guard() as a Python decorator, for sync and async tools.
# DENY or HITL (a fail-closed DENY included) raises before the tool runs; ALLOW runs it, then settles.
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable, Optional, TypeVar, Union

from .client import LeashClient, Nonce
from .errors import LeashDenied, LeashHitl
from .money import Money
from .types import PreExecResult

F = TypeVar("F", bound=Callable[..., Any])


def _default_params(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The call's arguments by parameter name (what the model passed), without self/cls."""
    signature = inspect.signature(fn)

    def params(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        out: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if name in ("self", "cls") and kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                continue
            if kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                out[name] = list(value)
            else:
                out[name] = value
        return out

    return params


def guard(
    client: LeashClient,
    *,
    tool_name: str,
    estimate_usd: Union[Money, Callable[..., Money]] = 0,
    cost_usd: Optional[Callable[..., Money]] = None,
    cost_on_error_usd: Money = 0,
    params: Optional[Callable[..., Any]] = None,
    nonce: Optional[Callable[[], Nonce]] = None,
    session_id: Optional[str] = None,
    on_decision: Optional[Callable[[PreExecResult], None]] = None,
) -> Callable[[F], F]:
    """Wraps a tool so every call asks the daemon first.

    tool_name: the tool as Leash sees it (repeat limits and windows count per name).
    estimate_usd: the cost checked against the budget before the call (or a function of the args).
    cost_usd: the actual cost, a function of (result, *args, **kwargs); default: the estimate.
    cost_on_error_usd: the actual cost when the tool raises (default 0).
    params: the params Leash sees, a function of the args (a dict, or JSON text); default: the
      arguments by parameter name.
    nonce: a fresh replay token per dispatch; default: a random integer.
    session_id: default: the client's session (register() first).
    on_decision: called with every verdict (and its receipt) before the tool runs or the error.
    """

    def decorate(fn: F) -> F:
        params_of = params or _default_params(fn)

        def ask(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[PreExecResult, Money]:
            estimate = estimate_usd(*args, **kwargs) if callable(estimate_usd) else estimate_usd
            verdict = client.pre_exec(
                tool_name,
                params_of(*args, **kwargs),
                estimated_cost_usd=estimate,
                nonce=nonce() if nonce is not None else None,
                session_id=session_id,
            )
            if on_decision is not None:
                on_decision(verdict)
            if verdict.verdict == "DENY":
                raise LeashDenied(verdict)
            if verdict.verdict == "HITL":
                raise LeashHitl(verdict)
            return verdict, estimate

        def settle(verdict: PreExecResult, actual: Money) -> None:
            client.post_exec(verdict.call_number, actual, session_id=verdict.session_id)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                # The client blocks on its socket; keep the event loop free meanwhile.
                verdict, estimate = await asyncio.to_thread(ask, args, kwargs)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    await asyncio.to_thread(settle, verdict, cost_on_error_usd)
                    raise
                actual = cost_usd(result, *args, **kwargs) if cost_usd is not None else estimate
                await asyncio.to_thread(settle, verdict, actual)
                return result

            return guarded_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            verdict, estimate = ask(args, kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                settle(verdict, cost_on_error_usd)
                raise
            settle(verdict, cost_usd(result, *args, **kwargs) if cost_usd is not None else estimate)
            return result

        return guarded  # type: ignore[return-value]

    return decorate
