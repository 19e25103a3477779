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
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/internal/emf"
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

// Handle processes a batch, one message after the other, and reports the messages to
// retry in the partial batch response. It never returns an error: a failed message is
// reported alone, so the others are not redelivered.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
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
	o, err := shop.DecodeOrder([]byte(msg.Body))
	if err != nil {
		put(MetricMessagesMalformed)
		attrs := []any{"error", err.Error()}
		var fe *shop.FieldError
		if errors.As(err, &fe) {
			attrs = append(attrs, "field", fe.Field, "reason", fe.Reason)
		}
		log.ErrorContext(ctx, "malformed order message; returned for redrive to the dead-letter queue", attrs...)
		return false
	}
	log = log.With("orderId", o.OrderID)
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
