package lockcore_test

import (
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A Queue lease whose validity mostly went by unrenewed while its holder waited is
// renewed at entry (0f328cf). That renewal was not bounded by the validity left, as a
// heartbeat's is: while the table kept refusing the row's writes it went on past the
// lease's end (the heartbeat meanwhile reported the lease lost), and when a retry landed
// at last Acquire returned a lease already lost — Done closed, no heartbeat, its row
// left in the queue for the next waiters to wait out.
func TestQueueEntryRenewalEndsWithTheValidity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const lease = 3 * time.Second
	opts := func(owner string, extra ...lockcore.Option) []lockcore.Option {
		return fast(owner, append([]lockcore.Option{lockcore.WithMinLease(lease), lockcore.WithLease(lease)}, extra...)...)
	}
	a, _ := lockcore.NewQueue(e.db, e.locks, opts("a")...)
	// b's writes are throttled from its ticket on (as in TestQueueEntryRefreshesAnAgedLease),
	// and pass again only well after its validity ran out.
	fb := &throttledWrites{DynamoDB: e.db}
	ticketAt := make(chan time.Time, 1)
	b, _ := lockcore.NewQueue(fb, e.locks, opts("b", lockcore.WithAfterTicketHook(func(string, int64) {
		fb.on.Store(true)
		ticketAt <- time.Now()
	}))...)
	la, err := a.Acquire(ctx, "aged-throttled")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lockcore.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		lb, err := b.Acquire(ctx, "aged-throttled", lockcore.WaitUpTo(10*time.Second))
		got <- result{lb, err}
	}()
	at := <-ticketAt
	time.Sleep(lease * 6 / 10) // b's validity, counted from its ticket, is 60 % gone
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(at.Add(lease + time.Second))) // b's validity ran out a second ago
	fb.on.Store(false)
	r := <-got
	if r.err != nil {
		t.Logf("b's Acquire: %v", r.err)
		return
	}
	defer func() { _ = r.l.Release(ctx) }()
	select {
	case <-r.l.Done():
		t.Fatalf("Acquire returned a lease already lost (%v; %s of validity left)", r.l.Err(), r.l.Remaining())
	default:
	}
}
