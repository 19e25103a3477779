package shop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// pauseRejection holds back the transaction that records an adjustment's rejection
// until the test lets it go.
type pauseRejection struct {
	*dynamodb.Client
	paused, proceed chan struct{}
}

func (p *pauseRejection) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		if it.Put != nil && it.Put.Item["rejectedAt"] != nil {
			close(p.paused)
			<-p.proceed
			break
		}
	}
	return p.Client.TransactWriteItems(ctx, in, o...)
}

// A restock by a holder that lost its SKU lease (paused past it) must not land while a
// newer holder holds the lock: that holder read the stock, found a write-off too large
// and is recording the rejection — permanently — against that stock. The fence alone let
// the restock through (the newer holder had not written the stock yet): the write-off
// was rejected as "3 available" while 13 were (found by an outside review).
func TestStaleRestockDoesNotLandUnderANewerHolder(t *testing.T) {
	e := newEnv(t)
	paused, proceed := make(chan struct{}), make(chan struct{})
	slow := e.service(t, "slow",
		shop.WithLockOptions(lockcore.WithHeartbeat(0)),
		shop.WithCrashHook(func(p string) error {
			if p == shop.CrashAdjustmentLocked {
				close(paused)
				<-proceed
			}
			return nil
		}))
	seed(t, slow, map[string]int{"MUG-RED-350": 3})
	type res struct {
		applied bool
		err     error
	}
	slowRes := make(chan res, 1)
	go func() {
		ok, err := slow.ApplyAdjustment(context.Background(), shop.Adjustment{AdjustmentID: "adj-X", SKU: "MUG-RED-350", Delta: 10, Reason: "restock"})
		slowRes <- res{ok, err}
	}()
	<-paused
	time.Sleep(1200 * time.Millisecond) // past slow's 1 s lease

	pdb := &pauseRejection{Client: e.db, paused: make(chan struct{}), proceed: make(chan struct{})}
	live, err := shop.NewService(pdb, e.t, shop.WithOwner("live"), shop.WithLease(5*time.Second),
		shop.WithTakeoverSkew(0), shop.WithWaitBudget(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	liveRes := make(chan res, 1)
	go func() {
		ok, err := live.ApplyAdjustment(ctxT(t, 20*time.Second), shop.Adjustment{AdjustmentID: "adj-Y", SKU: "MUG-RED-350", Delta: -5, Reason: "write-off"})
		liveRes <- res{ok, err}
	}()
	<-pdb.paused // live holds the lock, read 3, decided to reject adj-Y
	close(proceed)
	s := <-slowRes
	if !errors.Is(s.err, lockcore.ErrLeaseLost) {
		t.Errorf("stale restock: applied=%v err=%v; want ErrLeaseLost (another client holds the SKU lock)", s.applied, s.err)
	}
	wantStock(t, live, "MUG-RED-350", 3, 0)
	close(pdb.proceed)
	if l := <-liveRes; !errors.Is(l.err, shop.ErrInsufficientStock) {
		t.Errorf("write-off of 5 with 3 available: applied=%v err=%v; want ErrInsufficientStock", l.applied, l.err)
	}
}
