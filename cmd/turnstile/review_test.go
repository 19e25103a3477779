package main

import (
	"strings"
	"testing"
)

// A watch that could not read the lock at all (here: no such table) must not exit 0:
// with --count a script samples the lock and trusts the exit status.
func TestLocksWatchFailedReadsExitNonZero(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out, errs, code := f.run("locks", "watch", "sku#GPU", "--table", f.table+"-missing", "--interval", "20ms", "--count", "2")
	if code != 1 {
		t.Fatalf("watch of a missing table: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if !strings.Contains(out, "error:") || !strings.Contains(errs, "ResourceNotFound") {
		t.Fatalf("watch of a missing table: the error is not reported\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
}
