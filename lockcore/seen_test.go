package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A caller that watched a crashed holder's item before queueing (Seen) has it taken over
// a lease after it first saw it, not a lease after it queued: without Seen the wait is
// at least a lease (3 s) from the Acquire, whatever the machine's speed.
func TestItemSeenCountsTheCallersWatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	key := dataKey("seen-crashed")
	h, _ := lockcore.NewItemLocker(e.db, e.data, fast("h", lockcore.WithHeartbeat(0))...)
	held, err := h.Acquire(ctx, key) // and never renewed: a crashed holder
	if err != nil {
		t.Fatal(err)
	}
	it := readData(t, e, key)
	seenAt := time.Now()
	time.Sleep(2500 * time.Millisecond) // the caller watches 2.5 s of the 3 s lease
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w")...)
	start := time.Now()
	l, err := w.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second), lockcore.Seen(it, seenAt))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if l.Token() <= held.Token() {
		t.Fatalf("token %d, not above the crashed holder's %d", l.Token(), held.Token())
	}
	if took >= 2500*time.Millisecond {
		t.Fatalf("took over %s after queueing: want about half a second (a lease after the caller first saw the holder), "+
			"well under the lease it waits without Seen", took)
	}
}

// Seen never shortens the wait for a live holder: its heartbeats move lockRev, and an
// observation of an older revision is ignored, however long ago it claims to be.
func TestItemSeenIgnoredForALiveHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	key := dataKey("seen-live")
	h, _ := lockcore.NewItemLocker(e.db, e.data, fast("h", lockcore.WithHeartbeat(time.Second))...)
	held, err := h.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	it := readData(t, e, key)
	time.Sleep(1500 * time.Millisecond) // a heartbeat moves lockRev
	w, _ := lockcore.NewItemLocker(e.db, e.data, fast("w")...)
	_, err = w.Acquire(ctx, key, lockcore.WaitUpTo(2*time.Second), lockcore.Seen(it, time.Now().Add(-time.Hour)))
	if !errors.Is(err, lockcore.ErrLockHeld) {
		t.Fatalf("a live holder's item, seen an hour ago at an older revision: %v, want ErrLockHeld", err)
	}
	if err := held.Renew(ctx); err != nil {
		t.Fatalf("the live holder lost its lease: %v", err)
	}
}

// Seen is checked where it is given: an ItemLocker's option, with an item and a time.
func TestSeenOptionErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 10*time.Second)
	it := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("m")...)
	il, _ := lockcore.NewItemLocker(e.db, e.data, fast("i")...)
	for name, try := range map[string]func() error{
		"mutex": func() error { _, err := m.Acquire(ctx, "seen", lockcore.Seen(it, time.Now())); return err },
		"nil item": func() error {
			_, err := il.Acquire(ctx, dataKey("seen-opt"), lockcore.Seen(nil, time.Now()))
			return err
		},
		"zero time": func() error {
			_, err := il.Acquire(ctx, dataKey("seen-opt"), lockcore.Seen(it, time.Time{}))
			return err
		},
	} {
		var oe *lockcore.OptionError
		if err := try(); !errors.As(err, &oe) || oe.Field != "seen" || !errors.Is(err, lockcore.ErrInvalidOption) {
			t.Errorf("%s: %v, want an OptionError on seen", name, err)
		}
	}
}
