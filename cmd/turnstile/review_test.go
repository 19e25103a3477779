package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/policycheck"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
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
	if !strings.Contains(out, "error: table "+f.table+"-missing not found at") || !strings.Contains(errs, "not found at "+testenv.Endpoint()) {
		t.Fatalf("watch of a missing table: the error is not reported\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
}

// An item lock's queue is part of its state: the table output of show --strategy item
// must list the waiters (as it does for ticket locks, mutexes and queues, and as the
// JSON output does), not show a lone holder while others queue behind it.
func TestLocksShowItemWaiters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := testenv.Table(t, "InventoryTable")
	db := testenv.Client(t)
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#pear"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"}}
	a, _ := lockcore.NewItemLocker(db, data, opts("worker-a")...)
	la, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	b, _ := lockcore.NewItemLocker(db, data, opts("worker-b")...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lb, err := b.Acquire(wctx, key); err == nil {
			_ = lb.Release(ctx)
		}
	}()
	in, _ := lockcore.NewInspector(db, data)
	deadline := time.Now().Add(10 * time.Second)
	for {
		il, err := in.ShowItem(ctx, data, key, lockcore.ItemAttributes{})
		if err != nil {
			t.Fatal(err)
		}
		if len(il.Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiter queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := f.ok("locks", "show", "--strategy", "item", "--item-table", data, "pk=SKU#pear,sk=STOCK")
	contains(t, out, "held", "worker-a", la.ID(), "waiters", "ticket 2")
	wcancel()
	<-done
	_ = la.Release(ctx)
}

// docActions returns the lock-table actions docs/using-lockcore.md's IAM table grants
// for the row whose first cell starts with row.
func docActions(t *testing.T, row string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/using-lockcore.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| "+row) {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("IAM table row %q: %d cells", line, len(cells))
		}
		got := map[string]bool{}
		for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(cells[2], -1) {
			got[m[1]] = true
		}
		return got
	}
	t.Fatalf("docs/using-lockcore.md has no IAM table row %q", row)
	return nil
}

// The IAM table of docs/using-lockcore.md is what an operator grants for `turnstile locks
// release --force`: it must list every action ForceRelease calls on the lock table.
func TestIAMDocForceReleaseActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	m, _ := lockcore.NewMutex(db, f.table, opts("worker-a", lockcore.WithHeartbeat(0))...)
	if _, err := m.Acquire(ctx, "sku#GPU"); err != nil {
		t.Fatal(err)
	}
	rec := policycheck.NewRecorder()
	in, err := lockcore.NewInspector(rec.Client(db), f.table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ForceRelease(ctx, "sku#GPU", lockcore.ForceOptions{Actor: "ops", Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	granted := docActions(t, "`Inspector.ForceRelease`")
	for _, c := range rec.Calls() {
		if a := strings.TrimPrefix(c.Action, "dynamodb:"); !granted[a] {
			t.Errorf("ForceRelease calls %s; the IAM table's Inspector.ForceRelease row grants %v", c, granted)
		}
	}
}
