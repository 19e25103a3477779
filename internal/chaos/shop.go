package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// The handler workload: order and stock-adjustment messages delivered to the
// order/inventory handlers (internal/shop) the way SQS and EventBridge deliver them: at
// least once. An order's odd-numbered deliveries go through ProcessOrders (the order
// processor's batch path), the even ones through ProcessOrder. A message that failed
// (busy, lease lost, crashed handler, network) is delivered again later; one that
// succeeded is sometimes delivered again anyway (duplicate delivery), and sometimes to
// two handlers at once (visibility timeout running out). Handlers talk through the fault
// proxy; now and then one dies at a crash point with its locks held
// (shop.WithCrashHook) and is replaced by a fresh one (a new execution environment, a
// new owner). Half the handlers run with clocks off by up to a second, inside the
// service's documented takeover skew allowance (2s).
//
// Every quantity and delta is 1, so the final stock counts applications exactly. After
// the run, undelivered messages are delivered until they succeed (straight to the
// engine, no faults), then:
//
//	lost            a message acknowledged (or drained) whose effect is missing: an order
//	                without a final status or with another decision than it reported, an
//	                adjustment without its marker, stock that moved less than the final
//	                orders and markers say, or a message that never succeeded
//	double applied  stock that moved more than the final orders and markers say

const (
	shopSKUs        = 8
	shopInitial     = 1000
	shopInvocation  = 6 * time.Second // a handler invocation's deadline (the Lambda timeout)
	shopCrashChance = 0.01            // per crash point
	shopDupChance   = 0.1             // a succeeded message is delivered again
	shopTwinChance  = 0.05            // a message is delivered to two handlers at once
)

var errHandlerCrash = errors.New("chaos: handler crashed")

type shopMsg struct {
	id    string
	order *shop.Order
	adj   *shop.Adjustment

	mu       sync.Mutex
	acked    bool   // a delivery succeeded
	outcome  string // first successful outcome: RESERVED, REJECTED, applied, rejected
	attempts int
}

// ShopResult is the handler workload's verdict.
type ShopResult struct {
	Messages       int            `json:"messages"`
	Orders         int            `json:"orders"`
	Adjustments    int            `json:"adjustments"`
	Deliveries     int            `json:"deliveries"`
	Duplicates     int            `json:"duplicate_deliveries"`
	HandlerCrashes int            `json:"handler_crashes"`
	SkewedHandlers int            `json:"skewed_handlers"`
	Reserved       int            `json:"orders_reserved"`
	Rejected       int            `json:"orders_rejected"`
	Drained        int            `json:"delivered_after_the_run"`
	Lost           int            `json:"messages_lost"`
	DoubleApplied  int            `json:"messages_double_applied"`
	NegativeStock  int            `json:"negative_stock"`
	Errors         map[string]int `json:"handler_errors,omitempty"`
	Findings       []string       `json:"findings,omitempty"`
}

type shopRun struct {
	r       *runner
	tables  shop.Tables
	res     *ShopResult
	countMu sync.Mutex // res counters during the run
	mu      sync.Mutex // msgs
	msgs    []*shopMsg
	ready   chan *shopMsg
	wg      sync.WaitGroup // redeliveries in flight
	quiet   *slog.Logger

	outstanding atomic.Int64 // messages not yet acknowledged
}

func (r *runner) newShopRun() *shopRun {
	return &shopRun{
		r:      r,
		tables: shop.Tables{Locks: r.locks, Orders: r.tables["OrdersTable"], Inventory: r.data},
		res:    &ShopResult{Errors: map[string]int{}},
		ready:  make(chan *shopMsg, 1<<16),
		quiet:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func shopSKU(i int) string { return fmt.Sprintf("chaos-sku-%d", i) }

func (s *shopRun) service(db *dynamodb.Client, owner string, offset time.Duration, crash func(string) error) (*shop.Service, error) {
	opts := []shop.Option{
		shop.WithOwner(owner), shop.WithLease(s.r.cfg.Lease), shop.WithLogger(s.quiet),
		shop.WithMetrics(nopMetrics{}),
	}
	if offset != 0 {
		opts = append(opts, shop.WithClock(offsetClock{offset}))
	}
	if crash != nil {
		opts = append(opts, shop.WithCrashHook(crash))
	}
	return shop.NewService(db, s.tables, opts...)
}

// seed stocks every SKU (straight to the engine).
func (s *shopRun) seed(ctx context.Context) error {
	svc, err := s.service(s.r.directDB, "chaos-shop-seed", 0, nil)
	if err != nil {
		return err
	}
	for i := range shopSKUs {
		if err := svc.SeedStock(ctx, shopSKU(i), shopInitial); err != nil {
			return fmt.Errorf("chaos: seed stock: %w", err)
		}
	}
	return nil
}

// run delivers messages until ctx ends.
func (s *shopRun) run(ctx context.Context, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 3))
	handlers := max(3, s.r.cfg.Workers)
	var wg sync.WaitGroup
	for h := range handlers {
		offset := time.Duration(0)
		if s.r.cfg.Skew && h%2 == 1 {
			offset = time.Duration(rng.IntN(2001)-1000) * time.Millisecond // within the 2s allowance
			if offset != 0 {
				s.res.SkewedHandlers++
			}
		}
		hseed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handler(ctx, h, offset, hseed)
		}()
	}
	// The producer: a new message every 10-40ms, while fewer than 4 per handler are
	// outstanding (the queue's consumers keep up; what stays behind is retried).
	for n := 0; ctx.Err() == nil; n++ {
		for s.outstanding.Load() >= int64(4*handlers) && ctx.Err() == nil {
			sleepCtx(ctx, 10*time.Millisecond)
		}
		m := &shopMsg{}
		if rng.IntN(4) == 0 {
			m.id = fmt.Sprintf("adj-%d", n)
			m.adj = &shop.Adjustment{AdjustmentID: m.id, SKU: shopSKU(rng.IntN(shopSKUs)), Delta: 1, Reason: "chaos"}
		} else {
			m.id = fmt.Sprintf("order-%d", n)
			o := &shop.Order{OrderID: m.id, CustomerID: "c" + fmt.Sprint(rng.IntN(50))}
			for _, k := range rng.Perm(shopSKUs)[:1+rng.IntN(3)] {
				o.Lines = append(o.Lines, shop.Line{SKU: shopSKU(k), Qty: 1})
			}
			m.order = o
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
		s.outstanding.Add(1)
		s.deliver(m)
		if rng.Float64() < shopTwinChance {
			s.deliver(m)
		}
		sleepCtx(ctx, time.Duration(10+rng.IntN(30))*time.Millisecond)
	}
	wg.Wait()
}

func (s *shopRun) deliver(m *shopMsg) {
	select {
	case s.ready <- m:
	default: // the queue is full: the message waits for the drain
	}
}

// redeliver delivers m again after d (unless the run ends first).
func (s *shopRun) redeliver(ctx context.Context, m *shopMsg, d time.Duration) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if sleepCtx(ctx, d) {
			s.deliver(m)
		}
	}()
}

func (s *shopRun) handler(ctx context.Context, h int, offset time.Duration, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 5))
	var rngMu sync.Mutex
	crash := func(string) error {
		rngMu.Lock()
		defer rngMu.Unlock()
		if rng.Float64() < shopCrashChance {
			return errHandlerCrash
		}
		return nil
	}
	generation := 0
	newService := func() *shop.Service {
		generation++
		svc, err := s.service(s.r.proxyDB, fmt.Sprintf("chaos-shop-h%d-g%d", h, generation), offset, crash)
		if err != nil {
			panic(err) // static options
		}
		return svc
	}
	svc := newService()
	for {
		var m *shopMsg
		select {
		case <-ctx.Done():
			return
		case m = <-s.ready:
		}
		err := s.process(ctx, svc, m)
		rngMu.Lock()
		dup := rng.Float64() < shopDupChance
		delay := time.Duration(50+rng.IntN(400)) * time.Millisecond
		rngMu.Unlock()
		switch {
		case err == nil:
			if dup {
				s.count(func(r *ShopResult) { r.Duplicates++ })
				s.redeliver(ctx, m, delay)
			}
		case errors.Is(err, errHandlerCrash):
			s.count(func(r *ShopResult) { r.HandlerCrashes++ })
			svc = newService() // a new execution environment
			s.redeliver(ctx, m, delay)
		default:
			s.redeliver(ctx, m, delay)
		}
	}
}

func (s *shopRun) count(f func(*ShopResult)) {
	s.countMu.Lock()
	f(s.res)
	s.countMu.Unlock()
}

// process delivers m once to svc; nil means the message can be deleted from its queue.
func (s *shopRun) process(ctx context.Context, svc *shop.Service, m *shopMsg) error {
	ictx, cancel := context.WithTimeout(ctx, shopInvocation)
	defer cancel()
	s.count(func(r *ShopResult) { r.Deliveries++ })
	m.mu.Lock()
	m.attempts++
	batch := m.attempts%2 == 1
	m.mu.Unlock()
	var outcome string
	var err error
	if m.order != nil {
		var out shop.Outcome
		if batch {
			// The deployed path (the order processor's batch of one), alternating with
			// ProcessOrder from delivery to delivery, so that the two meet on the same
			// orders: twins, redeliveries.
			r := svc.ProcessOrders(ictx, []shop.Order{*m.order})[0]
			out, err = r.Outcome, r.Err
		} else {
			out, err = svc.ProcessOrder(ictx, *m.order)
		}
		outcome = string(out.Status)
	} else {
		var applied bool
		applied, err = svc.ApplyAdjustment(ictx, *m.adj)
		outcome = "applied"
		_ = applied // false: a duplicate delivery of an applied adjustment
		if errors.Is(err, shop.ErrInsufficientStock) {
			outcome, err = "rejected", nil
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.count(func(r *ShopResult) { r.Errors[shopErrKind(err)]++ })
		}
		return err
	}
	m.mu.Lock()
	if !m.acked {
		m.acked, m.outcome = true, outcome
		s.outstanding.Add(-1)
	}
	m.mu.Unlock()
	return nil
}

func shopErrKind(err error) string {
	switch {
	case errors.Is(err, errHandlerCrash):
		return "handler crash"
	case errors.Is(err, shop.ErrBusy):
		return "busy"
	}
	return errKind(err)
}

// drain delivers every message that never succeeded, straight to the engine, until it
// does (or the budget runs out).
func (s *shopRun) drain(ctx context.Context) {
	s.wg.Wait()
	svc, err := s.service(s.r.directDB, "chaos-shop-drain", 0, nil)
	if err != nil {
		panic(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	s.mu.Lock()
	msgs := append([]*shopMsg(nil), s.msgs...)
	s.mu.Unlock()
	for _, m := range msgs {
		m.mu.Lock()
		acked := m.acked
		m.mu.Unlock()
		if acked {
			continue
		}
		s.res.Drained++
		for time.Now().Before(deadline) {
			if s.process(ctx, svc, m) == nil {
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
}

type nopMetrics struct{}

func (nopMetrics) PutMetric(string, float64, emf.Unit) {}

// verify compares the final state with the messages (straight to the engine).
func (s *shopRun) verify(ctx context.Context) error {
	res := s.res
	svc, err := s.service(s.r.directDB, "chaos-shop-verify", 0, nil)
	if err != nil {
		return err
	}
	finding := func(format string, args ...any) {
		if len(res.Findings) < 20 {
			res.Findings = append(res.Findings, fmt.Sprintf(format, args...))
		}
	}
	expReserved := make([]int, shopSKUs)
	markers := make([]int, shopSKUs)
	skuIndex := map[string]int{}
	for i := range shopSKUs {
		skuIndex[shopSKU(i)] = i
	}
	res.Messages = len(s.msgs)
	for _, m := range s.msgs {
		if m.order != nil {
			res.Orders++
			st, exists, err := svc.OrderStatus(ctx, m.id)
			if err != nil {
				return err
			}
			switch {
			case !m.acked:
				res.Lost++
				finding("order %s never succeeded (%d deliveries)", m.id, m.attempts)
			case !exists || !st.Final():
				res.Lost++
				finding("order %s acknowledged as %s but its status is %q", m.id, m.outcome, st)
			case string(st) != m.outcome:
				res.Lost++
				finding("order %s acknowledged as %s but decided %s", m.id, m.outcome, st)
			}
			if st == shop.StatusReserved {
				res.Reserved++
				for _, l := range m.order.Lines {
					expReserved[skuIndex[l.SKU]] += l.Qty
				}
			} else if st == shop.StatusRejected {
				res.Rejected++
			}
			continue
		}
		res.Adjustments++
		out, err := s.r.directDB.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.tables.Inventory), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: shop.StockPKPrefix + m.adj.SKU},
				"sk": &types.AttributeValueMemberS{Value: shop.AdjustmentSKPrefix + m.adj.AdjustmentID},
			},
		})
		if err != nil {
			return err
		}
		// A rejected adjustment's marker records the rejection (outcome REJECTED).
		rejected := false
		if out.Item != nil {
			if o, ok := out.Item["outcome"].(*types.AttributeValueMemberS); ok && o.Value == shop.OutcomeRejected {
				rejected = true
			} else {
				markers[skuIndex[m.adj.SKU]] += m.adj.Delta
			}
		}
		switch {
		case !m.acked:
			res.Lost++
			finding("adjustment %s never succeeded (%d deliveries)", m.id, m.attempts)
		case m.outcome == "applied" && (out.Item == nil || rejected):
			res.Lost++
			finding("adjustment %s acknowledged as applied but not applied (marker %v)", m.id, out.Item != nil)
		case m.outcome == "rejected" && !rejected:
			res.Lost++
			finding("adjustment %s acknowledged as rejected but no rejection is recorded", m.id)
		}
	}
	for i := range shopSKUs {
		avail, reserved, err := svc.Stock(ctx, shopSKU(i))
		if err != nil {
			return err
		}
		if avail < 0 {
			res.NegativeStock++
			finding("%s: available stock %d", shopSKU(i), avail)
		}
		reservedDiff := reserved - expReserved[i]
		totalDiff := avail + reserved - (shopInitial + markers[i])
		if reservedDiff > 0 {
			res.DoubleApplied += reservedDiff
		} else {
			res.Lost -= reservedDiff
		}
		if totalDiff > 0 {
			res.DoubleApplied += totalDiff
		} else {
			res.Lost -= totalDiff
		}
		if reservedDiff != 0 || totalDiff != 0 {
			finding("%s: reserved %d for orders reserving %d; available+reserved %d for %d initial + %d adjustments",
				shopSKU(i), reserved, expReserved[i], avail+reserved, shopInitial, markers[i])
		}
	}
	return nil
}
