// Package handler is the order processor's Lambda handler: SQS batches of orders, each
// reserved (or rejected) by shop.Service.ProcessOrder, with partial batch responses.
//
// A message ends in batchItemFailures — and comes back after the queue's visibility
// timeout, or goes to the dead-letter queue after maxReceiveCount — when it is malformed
// (logged at ERROR naming the field), when its locks were contended (ErrBusy: no sleeping
// inside Lambda), when a lease was lost, or on any transient error. Every other message of
// the batch is processed normally.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

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

// Handler handles SQS events of the orders queue.
type Handler struct {
	svc     Processor
	log     *slog.Logger
	metrics func(ctx context.Context) Metrics
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

// New returns a Handler processing orders with svc.
func New(svc Processor, opts ...Option) *Handler {
	h := &Handler{
		svc: svc,
		log: obs.Logger(),
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
	for _, msg := range ev.Records {
		put(MetricMessages)
		if !h.handleOne(ctx, msg, put) {
			put(MetricMessagesRetried)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
		}
	}
	return resp, nil
}

// handleOne processes one message and reports whether it is done with (success or a
// final outcome); false returns it to the queue.
func (h *Handler) handleOne(ctx context.Context, msg events.SQSMessage, put func(string)) bool {
	log := h.log.With("messageId", msg.MessageId, "receiveCount", msg.Attributes["ApproximateReceiveCount"])
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < shop.MinRemaining {
		log.WarnContext(ctx, "invocation deadline too close; returning message for redelivery")
		return false
	}
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
		return false
	}
	log = log.With("orderId", o.OrderID)
	if len(unknown) > 0 {
		log.DebugContext(ctx, "order message has fields this version does not know; ignored", "ignoredFields", unknown)
	}
	out, err := h.svc.ProcessOrder(ctx, o)
	switch {
	case err == nil:
		log.InfoContext(ctx, "order processed", "status", string(out.Status), "duplicate", out.Duplicate, "reason", out.Reason)
		return true
	case errors.Is(err, shop.ErrBusy):
		log.InfoContext(ctx, "locks contended; returning message for redelivery", "error", err.Error())
	case errors.Is(err, lockcore.ErrLeaseLost):
		log.WarnContext(ctx, "lease lost before the decision was written; returning message for redelivery", "error", err.Error())
	case errors.Is(err, shop.ErrInvalid):
		put(MetricMessagesMalformed)
		log.ErrorContext(ctx, "invalid order; returned for redrive to the dead-letter queue", "error", err.Error())
	default:
		log.ErrorContext(ctx, "order processing failed; returning message for redelivery", "error", err.Error())
	}
	return false
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }
