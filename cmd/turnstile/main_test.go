package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a lock table on the test engine and the environment the CLI sees.
type fixture struct {
	t     *testing.T
	table string
	vars  map[string]string
	env   env
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, table: testenv.Table(t, "LockTable"),
		vars: map[string]string{"DYNAMODB_ENDPOINT": testenv.Endpoint(), "USER": "tester"}}
	f.env = env{
		getenv: func(k string) string { return f.vars[k] },
		stackOutputs: func(_ context.Context, stack, _ string) (map[string]string, error) {
			if stack != "turnstile-dev" {
				return nil, errors.New("stack not found")
			}
			return map[string]string{"LockTableName": f.table, "OrdersTableName": "orders"}, nil
		},
		callerARN: func(context.Context, string, string) (string, error) {
			return "", errors.New("no AWS here")
		},
	}
	return f
}

// run runs the CLI in-process; it returns stdout, stderr and the exit status.
func (f *fixture) run(args ...string) (string, string, int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, f.env)
	return out.String(), errb.String(), code
}

// ok runs the CLI and fails the test unless it exits 0.
func (f *fixture) ok(args ...string) string {
	f.t.Helper()
	out, errs, code := f.run(args...)
	if code != 0 {
		f.t.Fatalf("turnstile %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func opts(owner string, extra ...lockcore.Option) []lockcore.Option {
	return append([]lockcore.Option{lockcore.WithOwner(owner), lockcore.WithLease(3 * time.Second),
		lockcore.WithBackoff(2*time.Millisecond, 50*time.Millisecond)}, extra...)
}

func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestLocksLsShowJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	m, _ := lockcore.NewMutex(db, f.table, opts("worker-a")...)
	lm, err := m.Acquire(ctx, "sku#GPU", lockcore.Data([]byte("ord-42")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lm.Release(ctx) }()
	tl, _ := lockcore.NewTicketLock(db, f.table, opts("worker-b")...)
	lt, err := tl.Acquire(ctx, "sku#CPU")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lt.Release(ctx) }()
	waiter, _ := lockcore.NewTicketLock(db, f.table, opts("worker-c")...)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if l, err := waiter.Acquire(wctx, "sku#CPU"); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	defer func() { wcancel(); <-wdone }()
	q, _ := lockcore.NewQueue(db, f.table, opts("worker-d")...)
	lq, err := q.Acquire(ctx, "order#7")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lq.Release(ctx) }()
	// Wait until the ticket waiter is in line.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(f.ok("locks", "show", "sku#CPU", "--table", f.table), "ticket 2") {
		if time.Now().After(deadline) {
			t.Fatal("ticket waiter never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}

	out := f.ok("locks", "ls", "--table", f.table)
	contains(t, out, "KEY", "FENCE", "4294967297 (epoch 1, seq 1)", "sku#GPU", "worker-a", lm.ID(), "sku#CPU", "ticket 1", "order#7", "worker-d", "queue")
	if strings.Contains(out, "turnstile#") {
		t.Fatalf("ls lists lockcore's keeper rows:\n%s", out)
	}
	// JSON, with the table from the environment.
	f.vars["TURNSTILE_LOCK_TABLE"] = f.table
	var locks []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "ls", "-o", "json")), &locks); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 3 {
		t.Fatalf("ls -o json: %d locks, want 3: %+v", len(locks), locks)
	}
	byKey := map[string]lockcore.Lock{}
	for _, l := range locks {
		byKey[l.Key] = l
	}
	if g := byKey["sku#GPU"]; g.Strategy != lockcore.StrategyMutex || g.Holder.Owner != "worker-a" || g.Fence.Token != lm.Token() || g.Fence.Seq != 1 {
		t.Fatalf("json mutex %+v", g)
	}
	if c := byKey["sku#CPU"]; c.Strategy != lockcore.StrategyTicket || len(c.Waiters) != 1 || c.Waiters[0].Ticket != 2 {
		t.Fatalf("json ticket lock %+v", c)
	}
	if o := byKey["order#7"]; o.Strategy != lockcore.StrategyQueue || o.Holder.LeaseID != lq.ID() {
		t.Fatalf("json queue %+v", o)
	}
	// Filters.
	out = f.ok("locks", "ls", "--strategy", "ticket,queue", "--state", "held")
	if strings.Contains(out, "sku#GPU") || !strings.Contains(out, "sku#CPU") {
		t.Fatalf("ls --strategy ticket,queue:\n%s", out)
	}
	if out = f.ok("locks", "ls", "--state", "released"); !strings.Contains(out, "no released locks") {
		t.Fatalf("ls --state released:\n%s", out)
	}

	// show: details, fence decoded.
	out = f.ok("locks", "show", "sku#GPU")
	contains(t, out, "strategy", "mutex", "state", "held", "owner", "worker-a", "lease id", lm.ID(), "acquired", "lease end",
		"lease 3s", "(epoch 1, seq 1)", "revision", `"ord-42"`)
	out = f.ok("locks", "show", "sku#CPU", "--strategy", "ticket")
	contains(t, out, "ticket 1", "serving 1, last issued 2", "1, in the order they enter", "ticket entries carry no owner names")
	out = f.ok("locks", "show", "--namespace", "queue", "order#7")
	contains(t, out, "queue", "worker-d", "heartbeat", "waiters", "none")
	var shown []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "show", "sku#GPU", "-o", "json")), &shown); err != nil || len(shown) != 1 || shown[0].Holder.LeaseID != lm.ID() {
		t.Fatalf("show -o json: %+v, %v", shown, err)
	}
	// A key without locks.
	if _, errs, code := f.run("locks", "show", "sku#NONE"); code != 1 || !strings.Contains(errs, "no such lock") {
		t.Fatalf("show of an unknown key: exit %d, %s", code, errs)
	}
}

func TestLocksReleaseForce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	m, _ := lockcore.NewMutex(db, f.table, opts("worker-a", lockcore.WithHeartbeat(100*time.Millisecond))...)
	l, err := m.Acquire(ctx, "sku#GPU")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"locks", "release", "sku#GPU", "--table", f.table}
	if _, errs, code := f.run(args...); code != 2 || !strings.Contains(errs, "--force is required") {
		t.Fatalf("release without --force: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run(append(args, "--force")...); code != 2 || !strings.Contains(errs, "--reason is required") {
		t.Fatalf("release without --reason: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run(append(args, "--force", "--reason", "x", "--current", "--strategy", "queue")...); code != 2 || !strings.Contains(errs, "--strategy") {
		t.Fatalf("release --strategy queue: exit %d: %s", code, errs)
	}
	// An unpinned release must say so: it ends whatever lease is current when it runs.
	if _, errs, code := f.run(append(args, "--force", "--reason", "x")...); code != 2 || !strings.Contains(errs, "--lease or --token is required") {
		t.Fatalf("release without --lease, --token or --current: exit %d: %s", code, errs)
	}
	if _, errs, code := f.run(append(args, "--force", "--reason", "x", "--current", "--lease", "a#b")...); code != 2 || !strings.Contains(errs, "--current: not with") {
		t.Fatalf("release --current --lease: exit %d: %s", code, errs)
	}
	out := f.ok(append(args, "--force", "--reason", "holder hung on a payment call", "--current")...)
	contains(t, out, "ended lease", l.ID()+" of worker-a", "tester@", "holder hung on a payment call")
	if err := l.Renew(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("holder's renew after release --force: %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("holder's release after release --force: %v, want ErrLeaseLost", err)
	}
	out = f.ok("locks", "show", "sku#GPU", "--table", f.table)
	contains(t, out, "released", "last forced", "holder hung on a payment call", "ended lease "+l.ID()+" of worker-a",
		"audit (force-releases, oldest first)", "tester@")
	// Nothing left to release: exit 1, saying so.
	if _, errs, code := f.run(append(args, "--force", "--reason", "again", "--current")...); code != 1 || !strings.Contains(errs, "not held") {
		t.Fatalf("second release: exit %d: %s", code, errs)
	}
	// JSON record, explicit actor.
	l2, err := m.Acquire(ctx, "sku#GPU")
	if err != nil {
		t.Fatal(err)
	}
	var rec lockcore.ForceRecord
	err = json.Unmarshal([]byte(f.ok(append(args, "--force", "--reason", "drill", "--actor", "ops-bot", "--lease", l2.ID(), "-o", "json")...)), &rec)
	if err != nil || rec.Actor != "ops-bot" || rec.LeaseID != l2.ID() || rec.Token.Token != l2.Token() {
		t.Fatalf("release -o json: %+v, %v", rec, err)
	}
	var shown []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "show", "sku#GPU", "--table", f.table, "-o", "json")), &shown); err != nil {
		t.Fatal(err)
	}
	if len(shown) != 1 || shown[0].LastForced == nil || shown[0].LastForced.Actor != "ops-bot" || len(shown[0].Audit) != 2 {
		t.Fatalf("show -o json after two releases: %+v", shown)
	}
	<-l2.Done()
}

func TestLocksAbandoned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	dead, _ := lockcore.NewMutex(db, f.table, opts("crashed", lockcore.WithHeartbeat(0))...)
	if _, err := dead.Acquire(ctx, "order#1"); err != nil { // never renewed nor released
		t.Fatal(err)
	}
	live, _ := lockcore.NewMutex(db, f.table, opts("alive")...)
	ll, err := live.Acquire(ctx, "order#2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ll.Release(ctx) }()
	if out := f.ok("locks", "abandoned", "--table", f.table); !strings.Contains(out, "no abandoned locks") {
		t.Fatalf("abandoned before the lease ended:\n%s", out)
	}
	time.Sleep(3*time.Second + 200*time.Millisecond)
	out := f.ok("locks", "abandoned", "--table", f.table, "--skew", "100ms")
	contains(t, out, "order#1", "crashed", "abandoned")
	if strings.Contains(out, "order#2") {
		t.Fatalf("a heartbeating lease listed as abandoned:\n%s", out)
	}
	var locks []lockcore.Lock
	if err := json.Unmarshal([]byte(f.ok("locks", "abandoned", "--table", f.table, "--skew", "100ms", "-o", "json")), &locks); err != nil ||
		len(locks) != 1 || locks[0].State != lockcore.LockAbandoned {
		t.Fatalf("abandoned -o json: %+v, %v", locks, err)
	}
	out = f.ok("locks", "show", "order#1", "--table", f.table, "--skew", "100ms")
	contains(t, out, "abandoned (the holder's lease end + skew allowance has passed")
}

func TestLocksWatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	// Before the lock exists, watch says so and keeps going.
	out := f.ok("locks", "watch", "sku#GPU", "--table", f.table, "--interval", "20ms", "--count", "2")
	if strings.Count(out, "no lock rows for \"sku#GPU\" yet") != 2 {
		t.Fatalf("watch of a missing lock:\n%s", out)
	}
	m, _ := lockcore.NewMutex(db, f.table, opts("worker-a", lockcore.WithHeartbeat(0))...)
	l, err := m.Acquire(ctx, "sku#GPU")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	out = f.ok("locks", "watch", "sku#GPU", "--table", f.table, "--interval", "50ms", "--count", "3")
	if strings.Count(out, "every 50ms: turnstile locks watch sku#GPU") != 3 || strings.Count(out, l.ID()) != 3 {
		t.Fatalf("watch frames:\n%s", out)
	}
	contains(t, out, "unchanged", "(holder and revision, on this machine's clock)")
	out = f.ok("locks", "watch", "sku#GPU", "--table", f.table, "--interval", "20ms", "--count", "2", "-o", "json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("watch -o json: %d lines:\n%s", len(lines), out)
	}
	var frame struct {
		Locks []lockcore.Lock `json:"locks"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &frame); err != nil || len(frame.Locks) != 1 || frame.Locks[0].Holder.Owner != "worker-a" {
		t.Fatalf("watch frame %s: %v", lines[1], err)
	}
	// Ctrl-C (the context ends) stops it cleanly.
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan int)
	var buf bytes.Buffer
	go func() {
		done <- run(wctx, []string{"locks", "watch", "sku#GPU", "--table", f.table}, &buf, &buf, f.env)
	}()
	time.Sleep(300 * time.Millisecond)
	wcancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch after Ctrl-C: exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop when its context ended")
	}
}

func TestLocksShowItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := testenv.Table(t, "InventoryTable")
	db := testenv.Client(t)
	il, _ := lockcore.NewItemLocker(db, data, opts("worker-i")...)
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#apple"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"}}
	l, err := il.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	out := f.ok("locks", "show", "--strategy", "item", "--item-table", data, "pk=SKU#apple,sk=STOCK")
	contains(t, out, "pk=SKU#apple,sk=STOCK in "+data, "held", "worker-i", l.ID())
	if _, errs, code := f.run("locks", "show", "--strategy", "item", "pk=SKU#apple"); code != 2 || !strings.Contains(errs, "--item-table") {
		t.Fatalf("item without --item-table: exit %d: %s", code, errs)
	}
	// A missing item is "no such lock" (exit 1), in both outputs, as the README says.
	for _, o := range []string{"table", "json"} {
		out, errs, code := f.run("locks", "show", "--strategy", "item", "--item-table", data, "-o", o, "pk=SKU#pear,sk=STOCK")
		if code != 1 || !strings.Contains(errs, "no item pk=SKU#pear,sk=STOCK") {
			t.Errorf("missing item (-o %s): exit %d, stdout %q, stderr %q; want exit 1 naming the item", o, code, out, errs)
		}
	}
}

func TestUsageAndConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage:"},
		{[]string{"keys"}, 2, `unknown command "keys"`},
		{[]string{"locks"}, 2, "missing command"},
		{[]string{"locks", "rm"}, 2, `unknown command "rm"`},
		{[]string{"locks", "show"}, 2, "missing KEY"},
		{[]string{"locks", "show", "a", "b"}, 2, "unexpected arguments"},
		{[]string{"locks", "ls", "-o", "xml"}, 2, "-o: want table or json"},
		{[]string{"locks", "ls", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"locks", "ls"}, 2, "no lock table: pass --table NAME"},
		{[]string{"locks", "ls", "--stack", "nope"}, 1, "--stack nope: stack not found"},
		{[]string{"locks", "ls", "--table", "t", "--state", "stuck"}, 2, "--state: want held, abandoned or released"},
		{[]string{"locks", "ls", "--table", "t", "--endpoint", "not a url"}, 2, "--endpoint: want a URL"},
		{[]string{"locks", "show", "turnstile#fence#0001", "--table", "t"}, 2, "reserved prefix"},
		{[]string{"locks", "show", "k", "--table", "t", "--namespace", "a#b"}, 2, "must not contain"},
		{[]string{"locks", "watch", "k", "--table", "t", "--interval", "0s"}, 2, "--interval: must be at least"},
	}
	for _, c := range cases {
		_, errs, code := f.run(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("turnstile %q: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	// The table from a stack's outputs, and a stack without the output.
	if out := f.ok("locks", "ls", "--stack", "turnstile-dev"); !strings.Contains(out, "no locks in table "+f.table) {
		t.Fatalf("ls --stack:\n%s", out)
	}
	f.env.stackOutputs = func(context.Context, string, string) (map[string]string, error) {
		return map[string]string{"OrdersTableName": "o"}, nil
	}
	if _, errs, code := f.run("locks", "ls", "--stack", "other"); code != 1 || !strings.Contains(errs, "no LockTableName output (outputs: OrdersTableName)") {
		t.Fatalf("stack without the output: exit %d: %s", code, errs)
	}
}

// TestLocksCustomTableAttributes: --attributes (or $TURNSTILE_LOCK_ATTRIBUTES) reads a lock
// table whose key and TTL attributes have other names; a malformed value is a usage error.
func TestLocksCustomTableAttributes(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testenv.Client(t)
	names := lockcore.TableAttributes{PartitionKey: "PK", SortKey: "SK", TTL: "ttl"}
	table := f.table + "-attrs"
	if err := lockcore.CreateLockTable(ctx, db, table, lockcore.WithAttributes(names)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	m, err := lockcore.NewMutex(db, table, opts("alice", lockcore.WithTableAttributes(names))...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx, "sku#GPU")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	contains(t, f.ok("locks", "ls", "--table", table, "--attributes", "PK,SK,ttl"), "sku#GPU", "alice")
	f.vars["TURNSTILE_LOCK_ATTRIBUTES"] = "PK,SK,ttl"
	contains(t, f.ok("locks", "show", "sku#GPU", "--table", table), "alice")
	if _, errs, code := f.run("locks", "ls", "--table", table, "--attributes", "PK,SK"); code != 2 || !strings.Contains(errs, "want PK,SK,TTL") {
		t.Errorf("--attributes PK,SK: exit %d, stderr %q; want a usage error", code, errs)
	}
}
