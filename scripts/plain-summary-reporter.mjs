// A Vitest reporter that ends the run with one plain line, `vitest: N passed, M failed`, which CI reads
// as the test count. It adds to the default reporter; it reports nothing else.
export default class PlainSummaryReporter {
  onTestRunEnd(testModules, unhandledErrors = []) {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const module of testModules) {
      let failedHere = 0;
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === "passed") passed++;
        else if (state === "failed") failedHere++;
        else skipped++;
      }
      // A file that fails before or around its tests (an import error, a failing hook) counts as one
      // failure, so the line never says "0 failed" on a run that failed.
      if (failedHere === 0 && module.state() === "failed") failedHere = 1;
      failed += failedHere;
    }
    failed += unhandledErrors.length;
    process.stdout.write(
      `\nvitest: ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}\n`,
    );
  }
}
