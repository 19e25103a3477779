package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// TestMain runs the tests against the test engine; started by `playground start` (the
// test's own binary, re-executed with roleEnv), it is the holder process instead.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "hold" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	testenv.Main(m)
}

// TestPlaygroundShowsEveryKindOfLock runs `playground start` against the engine (it
// launches the holder process, this test binary), checks with the Inspector that the lock
// table has held locks with waiters of every strategy, an abandoned lease and a released
// lock, and the item lock with its waiter; then `playground stop` releases them.
func TestPlaygroundShowsEveryKindOfLock(t *testing.T) {
	o := defaultOptions()
	o.prefix = "playground-test-" + randomHex(4)
	o.stateDir = t.TempDir()
	db := testenv.Client(t)
	t.Cleanup(func() {
		_ = stopHolders(o, &bytes.Buffer{}) // on failure too
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, tb := range []string{o.lockTable(), o.itemTable()} {
			if err := deleteTable(ctx, db, tb); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var out, errb bytes.Buffer
	args := []string{"start", "-prefix", o.prefix, "-state-dir", o.stateDir, "-duration", "2m"}
	if code := run(ctx, args, &out, &errb); code != 0 {
		t.Fatalf("playground start: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"export DYNAMODB_ENDPOINT=" + testenv.Endpoint() + " TURNSTILE_LOCK_TABLE=" + o.lockTable(),
		"go run ./cmd/turnstile locks ls", "go run ./cmd/turnstile locks show " + keyMutex,
		"go run ./cmd/turnstile locks abandoned", "--item-table " + o.itemTable() + " " + itemKeyArg,
		"make playground-stop",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("start's output lacks %q:\n%s", want, out.String())
		}
	}
	pidb, err := os.ReadFile(o.pidFile())
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidb)))
	if !isHolder(pid) {
		t.Fatalf("no holder process %d running after start", pid)
	}

	// What the CLI lists: Inspector.List on the lock table.
	in, err := lockcore.NewInspector(db, o.lockTable())
	if err != nil {
		t.Fatal(err)
	}
	page, err := in.List(ctx, lockcore.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]lockcore.Lock{}
	for _, l := range page.Locks {
		got[l.Key] = l
	}
	for _, w := range []struct {
		key      string
		strategy lockcore.Strategy
		state    lockcore.LockState
		waiters  int
		owner    string
	}{
		{keyMutex, lockcore.StrategyMutex, lockcore.LockHeld, 2, "orderprocessor-a7f3"},
		{keyTicket, lockcore.StrategyTicket, lockcore.LockHeld, 2, ""},
		{keyQueue, lockcore.StrategyQueue, lockcore.LockHeld, 2, "orderprocessor-q1"},
		{keyAbandoned, lockcore.StrategyMutex, lockcore.LockAbandoned, 0, "orderprocessor-dead"},
		{keyReleased, lockcore.StrategyMutex, lockcore.LockReleased, 0, ""},
	} {
		l, ok := got[w.key]
		if !ok {
			t.Errorf("%s not listed; listed: %v", w.key, page.Locks)
			continue
		}
		if l.Strategy != w.strategy || l.State != w.state || len(l.Waiters) != w.waiters {
			t.Errorf("%s: %s %s with %d waiters, want %s %s with %d", w.key, l.Strategy, l.State, len(l.Waiters), w.strategy, w.state, w.waiters)
		}
		if w.owner != "" && (l.Holder == nil || l.Holder.Owner != w.owner) {
			t.Errorf("%s: holder %+v, want owner %s", w.key, l.Holder, w.owner)
		}
	}
	if len(got) != 5 {
		t.Errorf("listed %d locks, want 5: %v", len(got), page.Locks)
	}
	il, err := in.ShowItem(ctx, o.itemTable(), itemKey, lockcore.ItemAttributes{})
	if err != nil {
		t.Fatal(err)
	}
	if il.State != lockcore.LockHeld || len(il.Waiters) != 1 || il.Holder.Owner != "inventoryupdater-i1" {
		t.Errorf("item %s: %s, holder %+v, %d waiters; want held by inventoryupdater-i1 with 1 waiter", itemKeyArg, il.State, il.Holder, len(il.Waiters))
	}

	// stop: the holders release everything and exit.
	out.Reset()
	if code := run(ctx, []string{"stop", "-state-dir", o.stateDir}, &out, &errb); code != 0 {
		t.Fatalf("playground stop: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "stopped the holders") || alive(pid) {
		t.Fatalf("stop: %q; holder %d alive %v", out.String(), pid, alive(pid))
	}
	if _, err := os.Stat(o.pidFile()); !os.IsNotExist(err) {
		t.Errorf("pid file left after stop: %v", err)
	}
	// Every lock the holders kept is released, its queue drained (no lock handed to a
	// waiter that gave up); the abandoned one stays abandoned (nobody holds it).
	after, err := in.List(ctx, lockcore.ListOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range after.Locks {
		want := lockcore.LockReleased
		if l.Key == keyAbandoned {
			want = lockcore.LockAbandoned
		}
		if l.State != want || len(l.Waiters) != 0 {
			t.Errorf("after stop %s is %s with %d waiters, want %s with none\nholder log:\n%s", l.Key, l.State, len(l.Waiters), want, tail(o.logFile(), 30))
		}
	}
	if log := tail(o.logFile(), 3); !strings.Contains(log, "released everything") {
		t.Errorf("holder log ends:\n%s", log)
	}
	il, err = in.ShowItem(ctx, o.itemTable(), itemKey, lockcore.ItemAttributes{})
	if err != nil || il.State != lockcore.LockReleased || len(il.Waiters) != 0 {
		t.Errorf("item after stop: %+v, %v", il, err)
	}
	// The stock item is the data the ItemLocker held: still there.
	it, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(o.itemTable()), Key: itemKey, ConsistentRead: aws.Bool(true)})
	if err != nil || it.Item["available"] == nil {
		t.Errorf("inventory item after stop: %v, %v", it, err)
	}
	if code := run(ctx, []string{"stop", "-state-dir", o.stateDir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "no holders running") {
		t.Errorf("second stop: exit %d, %q", code, out.String())
	}
}

func TestPlaygroundUsage(t *testing.T) {
	t.Setenv("DYNAMODB_ENDPOINT", "")
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: playground start"},
		{[]string{"dance"}, 2, `unknown command "dance"`},
		{[]string{"start", "extra"}, 2, "unexpected arguments"},
		{[]string{"start", "-duration", "0s"}, 2, "-duration must be positive"},
		{[]string{"start", "-state-dir", os.TempDir()}, 1, "DYNAMODB_ENDPOINT is not set: run `make playground`"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String()+errb.String(), tt.want) {
			t.Errorf("playground %q: exit %d, %q; want exit %d with %q", tt.args, code, out.String()+errb.String(), tt.code, tt.want)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
