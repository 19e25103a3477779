package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

const accountID = "123456789012"

// sqsHandler is the order processor's handler shape (orderprocessor/handler.Handler and
// the naive baseline's).
type sqsHandler interface {
	Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)
}

// eventHandler is the inventory updater's handler shape.
type eventHandler interface {
	Handle(ctx context.Context, ev events.EventBridgeEvent) error
}

// environment is one Lambda execution environment of the order processor: a handler
// with its own service (and lock owner name). doomed environments die in their first
// invocation that reaches the crash point.
type environment struct {
	owner string
	h     sqsHandler
	// crashed reports whether the environment died during the last invocation.
	crashed func() bool
}

// sqsMapping simulates Lambda's SQS event source mapping with ReportBatchItemFailures:
// concurrency pollers receive batches of up to batchSize messages (waiting up to window
// for a batch to fill), invoke the function with a real events.SQSEvent under an
// invocation deadline, delete the messages that succeeded and leave the ones named in
// batchItemFailures (or the whole batch when the invocation failed or crashed) to come
// back after the visibility timeout.
type sqsMapping struct {
	q           *queue
	function    string
	concurrency int
	batchSize   int
	window      time.Duration
	timeout     time.Duration

	// newEnv returns a fresh (warm-started) environment; doomed asks for one that crashes.
	newEnv func(doomed bool) environment
	// doomed reports back whether a doomed environment died on its message (body) or
	// survived because the message never reached the crash point. A doomed environment
	// gets the first receive of each message sent as a crash (sendOptions.crash), alone.
	doomed func(env environment, died bool, body string)

	invocations, failedInvocations, crashedInvocations atomic.Int64
	batchItems, itemFailures                           atomic.Int64
}

func (m *sqsMapping) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < m.concurrency; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			env := m.newEnv(false)
			for ctx.Err() == nil {
				// A crash message waiting for its doomed environment goes first.
				if m.doomed != nil {
					now, cancel := context.WithCancel(ctx)
					cancel() // one look, no waiting
					if batch := m.q.receive(now, 1, 0, freshCrash); len(batch) > 0 {
						inv := m.newEnv(true)
						died := m.invoke(ctx, inv, batch)
						m.doomed(inv, died, batch[0].msg.Body)
						continue
					}
				}
				// Long polling that ends after a while, so that crash messages are seen.
				pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond+m.window)
				batch := m.q.receive(pctx, m.batchSize, m.window, notFreshCrash)
				cancel()
				if len(batch) == 0 {
					continue
				}
				m.invoke(ctx, env, batch)
			}
		}(i)
	}
	wg.Wait()
}

// invoke runs one invocation and reports whether its environment died.
func (m *sqsMapping) invoke(ctx context.Context, env environment, batch []delivery) bool {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(batch))}
	for i, d := range batch {
		ev.Records[i] = d.msg
	}
	m.invocations.Add(1)
	m.batchItems.Add(int64(len(batch)))
	ictx, cancel := invocationContext(ctx, m.function, m.timeout)
	resp, err := env.h.Handle(ictx, ev)
	cancel() // the invocation is over: heartbeats of a dead holder stop with it
	if env.crashed != nil && env.crashed() {
		// The execution environment died: Lambda never got a response, so the whole
		// batch stays in the queue until its visibility timeout expires.
		m.crashedInvocations.Add(1)
		return true
	}
	if err != nil {
		m.failedInvocations.Add(1)
		return false
	}
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, d := range batch {
		if failed[d.msg.MessageId] {
			m.itemFailures.Add(1)
			continue
		}
		m.q.delete(d.msg.ReceiptHandle)
	}
	return false
}

// invocationContext is the context of one Lambda invocation: a deadline of timeout and the
// Lambda context (request id, function ARN) that lambdacontext-aware code reads.
func invocationContext(ctx context.Context, function string, timeout time.Duration) (context.Context, context.CancelFunc) {
	ictx, cancel := context.WithTimeout(ctx, timeout)
	ictx = lambdacontext.NewContext(ictx, &lambdacontext.LambdaContext{
		AwsRequestID:       newUUID(),
		InvokedFunctionArn: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", region, accountID, function),
	})
	return ictx, cancel
}

// asyncInvoker simulates an EventBridge rule target invoked asynchronously: each event is
// delivered (some twice: EventBridge delivers at least once), a failed invocation is
// retried retries times with growing delays (Lambda's asynchronous retries, scaled down),
// and an event that still fails goes to the on-failure destination.
type asyncInvoker struct {
	function string
	// newHandler returns the handler of one execution environment (one per worker).
	newHandler  func() eventHandler
	concurrency int
	retries     int
	retryDelay  time.Duration
	timeout     time.Duration

	invocations, failures, deadLettered atomic.Int64
	mu                                  sync.Mutex
	dlq                                 map[string]int // dead-lettered events by cause
}

type busEvent struct {
	ev    events.EventBridgeEvent
	twice bool
}

func (a *asyncInvoker) run(ctx context.Context, in <-chan busEvent) {
	// Lambda queues asynchronous events and retries them on its own schedule: a retry
	// waiting for its delay occupies no execution environment.
	envs := make(chan eventHandler, a.concurrency)
	for i := 0; i < a.concurrency; i++ {
		envs <- a.newHandler()
	}
	var wg sync.WaitGroup
	for e := range in {
		n := 1
		if e.twice {
			n = 2 // delivered twice, concurrently, as to two execution environments
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(ev events.EventBridgeEvent) {
				defer wg.Done()
				a.deliver(ctx, envs, ev)
			}(e.ev)
		}
	}
	wg.Wait()
}

func (a *asyncInvoker) deliver(ctx context.Context, envs chan eventHandler, ev events.EventBridgeEvent) {
	delay := a.retryDelay
	var err error
	for attempt := 0; attempt <= a.retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay *= 2
		}
		var h eventHandler
		select {
		case <-ctx.Done():
			return
		case h = <-envs:
		}
		a.invocations.Add(1)
		ictx, cancel := invocationContext(ctx, a.function, a.timeout)
		err = h.Handle(ictx, ev)
		cancel()
		envs <- h
		if err == nil {
			return
		}
		a.failures.Add(1)
	}
	a.deadLettered.Add(1)
	cause := "other"
	switch {
	case errors.Is(err, shop.ErrInsufficientStock):
		cause = "insufficient_stock"
	case errors.Is(err, shop.ErrBusy):
		cause = "lock_contended"
	}
	a.mu.Lock()
	if a.dlq == nil {
		a.dlq = map[string]int{}
	}
	a.dlq[cause]++
	a.mu.Unlock()
}

// stockAdjustedEvent renders an adjustment as the EventBridge event the rule delivers.
func stockAdjustedEvent(detail any, at time.Time) events.EventBridgeEvent {
	b, _ := json.Marshal(detail)
	return events.EventBridgeEvent{
		Version:    "0",
		ID:         newUUID(),
		DetailType: "StockAdjusted",
		Source:     "turnstile.inventory", // the StockAdjusted rule matches source too
		AccountID:  accountID,
		Time:       at.UTC().Truncate(time.Second),
		Region:     region,
		Resources:  []string{},
		Detail:     b,
	}
}
