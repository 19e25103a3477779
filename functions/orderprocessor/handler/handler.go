// Package handler is the order processor's Lambda handler: SQS batches of orders, decided
// together by shop.Service.ProcessOrders (each SKU the batch needs is locked, read and
// released once), with partial batch responses.
//
// Contended locks are waited for within the invocation (the locks are fair; the wait ends
// a safety margin before the deadline), not answered by returning the message. A message
// ends in batchItemFailures — and comes back, or goes to the dead-letter queue after
// maxReceiveCount receives — when it is malformed (logged at ERROR naming the field),
// when its locks were still contended when the invocation's time ran out (ErrBusy), when
// a lease was lost, or on any transient error. Every other message of the batch is
// processed normally.
//
// How soon a returned message comes back: the queue's visibility timeout (180 s) is
// sized for a batch that is still running, not for a retry. For contention, a lost lease
// and malformed messages the handler therefore also calls ChangeMessageVisibility with a
// short jittered delay (see RetryDelay), so a retry costs seconds instead of three
// minutes, and a poison message reaches the dead-letter queue after its 5 receives in
// seconds instead of 15 minutes. Any other error (an outage, throttling) keeps the full
// visibility timeout as its backoff.
//
// Why contention retries do not exhaust maxReceiveCount 5 while poison still reaches the
// dead-letter queue after 5 receives: a contention return now means the locks stayed
// busy for a whole invocation (27 s of a 30 s timeout) of FIFO waiting — a dead holder's
// lease is taken over within one lease (at most 10 s) — so it is rare, and its delay
// doubles with each receive (1-2 s, 2-4 s, 4-8 s, 8-16 s): five receives span more than
// two minutes of waiting for the same locks, which is an incident worth the DLQ alarm,
// not contention. Poison fails its five receives regardless. A separate contention
// counter was considered and rejected: SQS cannot change a message's attributes on
// redelivery, so counting would need a re-send (sqs:SendMessage on the orders queue,
// which its policy denies to all but the janitor and the producers) and would let a
// message that is poison only under load (it always times out) circulate for ever.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// FunctionName names the function in metrics.
const FunctionName = "orderprocessor"

// Metric names of the handler (the service adds its own, see shop.Metric*).
const (
	MetricMessages          = "Messages"
	MetricMessagesMalformed = "MessagesMalformed"
	MetricMessagesRetried   = "MessagesRetried" // returned in batchItemFailures
	// MetricMessagesContended counts messages returned because their locks were still
	// contended when the invocation's time ran out (or a lease was lost).
	MetricMessagesContended = "MessagesContended"
	// MetricVisibilityChanged counts returned messages whose visibility was shortened
	// (ChangeMessageVisibility).
	MetricVisibilityChanged = "VisibilityChanged"
)

// Default retry delays (see RetryDelay).
const (
	DefaultRetryBase = 2 * time.Second
	DefaultRetryCap  = 30 * time.Second
)

// Metrics is a per-invocation metrics logger; *emf.Logger satisfies it.
type Metrics interface {
	shop.MetricsSink
	Flush() error
}

// Processor processes one order; *shop.Service satisfies it.
type Processor interface {
	ProcessOrder(ctx context.Context, o shop.Order) (shop.Outcome, error)
}

// BatchProcessor decides the orders of a batch together; *shop.Service satisfies it. A
// Processor that is not one gets the orders one by one.
type BatchProcessor interface {
	ProcessOrders(ctx context.Context, orders []shop.Order) []shop.BatchResult
}

// VisibilityChanger is the part of the SQS client the handler uses: *sqs.Client, or the
// demo's simulated queue.
type VisibilityChanger interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// Handler handles SQS events of the orders queue.
type Handler struct {
	svc       Processor
	log       *slog.Logger
	metrics   func(ctx context.Context) Metrics
	sqs       VisibilityChanger
	queueURL  string
	retryBase time.Duration
	retryCap  time.Duration
	legacy    bool
	jitter    func(n int64) int64
}

// Option configures a Handler.
type Option func(*Handler)

// WithLogger sets the logger (default obs.Logger()).
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// WithMetrics sets the per-invocation metrics factory (default: EMF on stdout via
// obs.Metrics). nil turns metrics off.
func WithMetrics(f func(ctx context.Context) Metrics) Option {
	return func(h *Handler) { h.metrics = f }
}

// WithVisibility makes the handler shorten the visibility of the messages it returns for
// contention, a lost lease or a malformed body (ChangeMessageVisibility on queueURL, the
// orders queue: ORDERS_QUEUE_URL) to RetryDelay instead of the queue's visibility
// timeout. Without it returned messages wait for the visibility timeout.
func WithVisibility(c VisibilityChanger, queueURL string) Option {
	return func(h *Handler) { h.sqs, h.queueURL = c, queueURL }
}

// WithRetryDelay sets the delay of a returned message's first retry (default 2s) and the
// most a retry waits (default 30s); see RetryDelay.
func WithRetryDelay(base, maxDelay time.Duration) Option {
	return func(h *Handler) { h.retryBase, h.retryCap = base, maxDelay }
}

// WithLegacy restores the handler of before, for comparison: orders one by one
// (ProcessOrder), and returned messages wait for the queue's visibility timeout. Use it
// with a service made WithLegacyWait.
func WithLegacy() Option { return func(h *Handler) { h.legacy = true } }

// New returns a Handler processing orders with svc.
func New(svc Processor, opts ...Option) *Handler {
	h := &Handler{
		svc:       svc,
		retryBase: DefaultRetryBase,
		retryCap:  DefaultRetryCap,
		jitter:    rand.Int64N,
		log:       obs.Logger(),
		metrics: func(ctx context.Context) Metrics {
			return obs.Metrics(ctx, FunctionName)
		},
	}
	for _, o := range opts {
		o(h)
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

// want describes the events the function handles, for InvalidEventError.
const want = "an SQS batch of the orders queue (Records with eventSource \"aws:sqs\")"

// HandleJSON is the function's Lambda entry point: it checks that the payload is an SQS
// batch and hands it to Handle. Any other event — empty, an EventBridge event, a stream
// batch, ... — is logged at ERROR naming what it is and fails the invocation with an
// *eventshape.InvalidEventError (errorType "InvalidEventError").
func (h *Handler) HandleJSON(ctx context.Context, raw json.RawMessage) (events.SQSEventResponse, error) {
	shape := eventshape.Classify(raw)
	if shape.Kind != eventshape.SQS {
		return h.invalidEvent(ctx, shape.String(), shape.LogAttrs()...)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return h.invalidEvent(ctx, "an SQS batch that does not decode ("+err.Error()+")", shape.LogAttrs()...)
	}
	return h.Handle(ctx, ev)
}

func (h *Handler) invalidEvent(ctx context.Context, got string, attrs ...any) (events.SQSEventResponse, error) {
	err := &eventshape.InvalidEventError{Function: FunctionName, Got: got, Want: want}
	h.log.ErrorContext(ctx, "not an SQS batch; failing the invocation", append(attrs, "error", err.Error())...)
	return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}, err
}

// Handle processes a batch, one message after the other, and reports the messages to
// retry in the partial batch response. A failed message is reported alone, so the others
// are not redelivered. It returns an error (an *eventshape.InvalidEventError) only for a
// batch Lambda's SQS event source never delivers: no records, or a record that is not an
// SQS message (no messageId, another eventSource) — a partial batch response could not
// name it, so the whole batch fails and comes back, and ends in the dead-letter queue.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	if len(ev.Records) == 0 {
		return h.invalidEvent(ctx, "an SQS batch without records", "eventKind", string(eventshape.Empty))
	}
	for i, msg := range ev.Records {
		if msg.MessageId == "" || msg.EventSource != "aws:sqs" {
			return h.invalidEvent(ctx, "a batch whose record "+itoa(i)+" is not an SQS message (messageId "+quote(msg.MessageId)+
				", eventSource "+quote(msg.EventSource)+")", "eventKind", string(eventshape.MixedRecords), "index", i)
		}
	}
	var m Metrics
	if h.metrics != nil {
		m = h.metrics(ctx)
		ctx = shop.ContextWithMetrics(ctx, m)
		defer func() {
			if err := m.Flush(); err != nil {
				h.log.WarnContext(ctx, "metrics flush failed", "error", err)
			}
		}()
	}
	put := func(name string) {
		if m != nil {
			m.PutMetric(name, 1, emf.Count)
		}
	}
	// Returned messages get their visibility shortened together at the end, one call
	// each, concurrently: one after the other, ten slow calls could outlast the safety
	// margin the batch leaves for them.
	type returned struct {
		msg events.SQSMessage
		r   retry
	}
	var back []returned
	defer func() {
		changed := make([]bool, len(back))
		var wg sync.WaitGroup
		for i, b := range back {
			wg.Add(1)
			go func() {
				defer wg.Done()
				changed[i] = h.shortenVisibility(ctx, b.msg, b.r)
			}()
		}
		wg.Wait()
		for _, c := range changed {
			if c {
				put(MetricVisibilityChanged)
			}
		}
	}()
	fail := func(msg events.SQSMessage, r retry) {
		put(MetricMessagesRetried)
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
		if r == retryContended {
			put(MetricMessagesContended)
		}
		back = append(back, returned{msg, r})
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < shop.MinRemaining {
		for _, msg := range ev.Records {
			put(MetricMessages)
			h.log.WarnContext(ctx, "invocation deadline too close; returning message for redelivery",
				"messageId", msg.MessageId, "receiveCount", msg.Attributes["ApproximateReceiveCount"])
			fail(msg, retryContended)
		}
		return resp, nil
	}
	// Decode every message; the valid orders are decided together.
	var orders []shop.Order
	var msgs []events.SQSMessage
	for _, msg := range ev.Records {
		put(MetricMessages)
		o, ok := h.decode(ctx, msg, put)
		if !ok {
			fail(msg, retryPoison)
			continue
		}
		orders = append(orders, o)
		msgs = append(msgs, msg)
	}
	results := h.process(ctx, orders)
	for i, r := range results {
		if rt := h.outcome(ctx, msgs[i], r, put); rt != retryNone {
			fail(msgs[i], rt)
		}
	}
	return resp, nil
}

// retry says why a message is returned, which decides how soon it comes back.
type retry int

const (
	retryNone      retry = iota
	retryContended       // locks still busy, or a lease lost: soon (RetryDelay)
	retryPoison          // malformed or invalid: soon too, it is on its way to the DLQ
	retryOther           // anything else: after the queue's visibility timeout
)

// process decides the orders: together (BatchProcessor) unless legacy.
func (h *Handler) process(ctx context.Context, orders []shop.Order) []shop.BatchResult {
	if len(orders) == 0 {
		return nil
	}
	if bp, ok := h.svc.(BatchProcessor); ok && !h.legacy {
		return bp.ProcessOrders(ctx, orders)
	}
	out := make([]shop.BatchResult, len(orders))
	for i, o := range orders {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < shop.MinRemaining {
			out[i] = shop.BatchResult{Outcome: shop.Outcome{OrderID: o.OrderID},
				Err: errors.Join(shop.ErrBusy, errors.New("invocation deadline too close"))}
			continue
		}
		res, err := h.svc.ProcessOrder(ctx, o)
		out[i] = shop.BatchResult{Outcome: res, Err: err}
	}
	return out
}

// decode parses one message; false means it is malformed (logged, counted).
func (h *Handler) decode(ctx context.Context, msg events.SQSMessage, put func(string)) (shop.Order, bool) {
	log := h.log.With("messageId", msg.MessageId, "receiveCount", msg.Attributes["ApproximateReceiveCount"])
	o, unknown, err := shop.DecodeOrderFields([]byte(msg.Body))
	if err != nil {
		put(MetricMessagesMalformed)
		attrs := []any{"error", err.Error()}
		var fe *shop.FieldError
		if errors.As(err, &fe) {
			// A whole-body error (no field) names the body itself.
			field := fe.Field
			if field == "" {
				field = "body"
			}
			attrs = []any{"error", field + ": " + fe.Reason, "field", field, "reason", fe.Reason}
		}
		log.ErrorContext(ctx, "malformed order message; returned for redrive to the dead-letter queue", attrs...)
		return shop.Order{}, false
	}
	if len(unknown) > 0 {
		log.With("orderId", o.OrderID).DebugContext(ctx, "order message has fields this version does not know; ignored", "ignoredFields", unknown)
	}
	return o, true
}

// outcome logs what happened to one order and says whether (and how) to return it.
func (h *Handler) outcome(ctx context.Context, msg events.SQSMessage, r shop.BatchResult, put func(string)) retry {
	log := h.log.With("messageId", msg.MessageId, "receiveCount", msg.Attributes["ApproximateReceiveCount"],
		"orderId", r.Outcome.OrderID)
	err := r.Err
	switch {
	case err == nil:
		out := r.Outcome
		log.InfoContext(ctx, "order processed", "status", string(out.Status), "duplicate", out.Duplicate, "reason", out.Reason)
		return retryNone
	case errors.Is(err, shop.ErrBusy):
		log.InfoContext(ctx, "locks contended until the invocation's time ran out; returning message for redelivery", "error", err.Error())
		return retryContended
	case errors.Is(err, lockcore.ErrLeaseLost):
		log.WarnContext(ctx, "lease lost before the decision was written; returning message for redelivery", "error", err.Error())
		return retryContended
	case errors.Is(err, shop.ErrInvalid):
		put(MetricMessagesMalformed)
		log.ErrorContext(ctx, "invalid order; returned for redrive to the dead-letter queue", "error", err.Error())
		return retryPoison
	default:
		log.ErrorContext(ctx, "order processing failed; returning message for redelivery", "error", err.Error())
		return retryOther
	}
}

// RetryDelay is how long a message returned on its receiveCount-th receive stays
// invisible: base doubled for each earlier receive (2s, 4s, 8s, 16s with the defaults),
// at most maxDelay, and jittered down to half of that so that the messages of a
// contended SKU do not come back together. SQS counts in whole seconds; the result is at
// least 1s.
func RetryDelay(receiveCount int, base, maxDelay time.Duration, jitter func(n int64) int64) time.Duration {
	d := base
	for i := 1; i < receiveCount && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if half := int64(d / 2); half > 0 && jitter != nil {
		d = time.Duration(half + jitter(half+1))
	}
	return max(d.Round(time.Second), time.Second)
}

// shortenVisibility shortens the visibility of a returned message (see the package doc) and reports
// whether it did.
func (h *Handler) shortenVisibility(ctx context.Context, msg events.SQSMessage, r retry) bool {
	if h.sqs == nil || h.legacy || r == retryOther || msg.ReceiptHandle == "" {
		return false
	}
	n, _ := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"])
	delay := RetryDelay(max(n, 1), h.retryBase, h.retryCap, h.jitter)
	// The call must be made even when the invocation's time is short: detach it from the
	// deadline, but bound it well below the safety margin.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shop.MinRemaining/2)
	defer cancel()
	_, err := h.sqs.ChangeMessageVisibility(cctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(h.queueURL),
		ReceiptHandle:     aws.String(msg.ReceiptHandle),
		VisibilityTimeout: int32(delay / time.Second),
	})
	if err != nil {
		// The message still comes back, after the visibility timeout.
		h.log.WarnContext(ctx, "change message visibility failed; the message returns after the visibility timeout",
			"messageId", msg.MessageId, "error", err.Error())
		return false
	}
	return true
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }
