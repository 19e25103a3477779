// Package handler is the inventory updater's Lambda handler: StockAdjusted events from
// EventBridge, applied by shop.Service.ApplyAdjustment under the SKU's lock, once per
// adjustment id, never letting available stock go negative.
//
// Outcomes: EventBridge invokes the function asynchronously, so a returned error makes
// Lambda retry the event (MaximumRetryAttempts in the template's EventInvokeConfig) and
// then hand it to the on-failure destination (the inventory DLQ). So Handle returns an
// error only where that helps:
//
//   - applied, or a duplicate delivery: success, logged at INFO;
//   - rejected because stock would go negative: a business decision, not a failure.
//     Retrying cannot change it, so the service records it (the adjustment's marker with
//     outcome REJECTED, the requested delta and the stock it saw) and Handle succeeds,
//     logging at WARN and counting AdjustmentsRejected: nothing is retried, nothing is
//     dropped, and a redelivery finds the recorded rejection;
//   - contention or a lost lease (errorType "LockContendedError") and transient failures
//     ("AdjustmentError"): an error, so Lambda retries;
//   - an event that is not a StockAdjusted event, or whose detail is malformed
//     ("InvalidEventError", naming the field): an error; retries fail the same way and
//     the event ends in the DLQ for a human, with the field named.
//
// Each failure is logged once, at ERROR or WARN, with the event id; the Lambda runtime's
// own report of the returned error is demoted to DEBUG by obs.Setup.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// FunctionName names the function in metrics.
const FunctionName = "inventoryupdater"

// DetailType is the detail-type of the events the function handles.
const DetailType = "StockAdjusted"

// Metrics is a per-invocation metrics logger; *emf.Logger satisfies it.
type Metrics interface {
	shop.MetricsSink
	Flush() error
}

// Applier applies one adjustment; *shop.Service satisfies it.
type Applier interface {
	ApplyAdjustment(ctx context.Context, a shop.Adjustment) (bool, error)
}

// Handler handles StockAdjusted events.
type Handler struct {
	svc     Applier
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

// New returns a Handler applying adjustments with svc.
func New(svc Applier, opts ...Option) *Handler {
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
const want = "an EventBridge event with detail-type \"" + DetailType + "\""

// LockContendedError is the error Handle returns when the SKU's lock was held by another
// invocation, or the lease was lost before the write: Lambda retries the event.
type LockContendedError struct {
	EventID string
	Err     error
}

func (e *LockContendedError) Error() string { return eventPrefix(e.EventID) + e.Err.Error() }

// Unwrap returns the cause (matching shop.ErrBusy or lockcore.ErrLeaseLost).
func (e *LockContendedError) Unwrap() error { return e.Err }

// AdjustmentError is the error Handle returns for any other failure to apply an
// adjustment (throttling, timeouts, ...): Lambda retries the event.
type AdjustmentError struct {
	EventID string
	Err     error
}

func (e *AdjustmentError) Error() string { return eventPrefix(e.EventID) + e.Err.Error() }

// Unwrap returns the cause.
func (e *AdjustmentError) Unwrap() error { return e.Err }

func eventPrefix(id string) string {
	if id == "" {
		return FunctionName + ": event without an id: "
	}
	return FunctionName + ": event " + id + ": "
}

// HandleJSON is the function's Lambda entry point: it checks that the payload is an
// EventBridge event and hands it to Handle. Any other event (empty, an SQS batch, a stream
// batch, ...) is logged at ERROR naming what it is and fails with an
// *eventshape.InvalidEventError.
func (h *Handler) HandleJSON(ctx context.Context, raw json.RawMessage) error {
	shape := eventshape.Classify(raw)
	if !shape.IsEventBridge() {
		return h.invalid(ctx, h.log, &eventshape.InvalidEventError{Function: FunctionName, Got: shape.String(), Want: want}, shape.LogAttrs()...)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return h.invalid(ctx, h.log, &eventshape.InvalidEventError{Function: FunctionName, EventID: shape.ID,
			Got: "an EventBridge event that does not decode (" + err.Error() + ")", Want: want}, shape.LogAttrs()...)
	}
	return h.Handle(ctx, ev)
}

func (h *Handler) invalid(ctx context.Context, log *slog.Logger, err *eventshape.InvalidEventError, attrs ...any) error {
	log.ErrorContext(ctx, "invalid event; failing it (retries fail the same way, then it goes to the on-failure destination)",
		append(attrs, "error", err.Error())...)
	return err
}

// Handle applies one StockAdjusted event; see the package documentation for its outcomes.
func (h *Handler) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if h.metrics != nil {
		m := h.metrics(ctx)
		ctx = shop.ContextWithMetrics(ctx, m)
		defer func() {
			if err := m.Flush(); err != nil {
				h.log.WarnContext(ctx, "metrics flush failed", "error", err)
			}
		}()
	}
	log := h.log.With("eventId", ev.ID, "detailType", ev.DetailType, "source", ev.Source)
	if ev.ID == "" && ev.DetailType == "" && ev.Source == "" {
		return h.invalid(ctx, log, &eventshape.InvalidEventError{Function: FunctionName,
			Got: "an event without id, detail-type or source (not an EventBridge event)", Want: want})
	}
	if ev.DetailType != DetailType {
		return h.invalid(ctx, log, &eventshape.InvalidEventError{Function: FunctionName, EventID: ev.ID,
			Got: "an EventBridge event with detail-type " + strconv.Quote(ev.DetailType), Want: want})
	}
	a, ignored, err := shop.DecodeAdjustmentFields(ev.Detail)
	if err != nil {
		var fe *shop.FieldError
		if errors.As(err, &fe) {
			// Name the field within the event: "detail.delta", or "detail" itself.
			fe = &shop.FieldError{Field: shop.FieldPath("detail", fe.Field), Reason: fe.Reason}
			return h.invalid(ctx, log, &eventshape.InvalidEventError{Function: FunctionName, EventID: ev.ID, Err: fe},
				"field", fe.Field, "reason", fe.Reason)
		}
		return h.invalid(ctx, log, &eventshape.InvalidEventError{Function: FunctionName, EventID: ev.ID, Err: err})
	}
	log = log.With("adjustmentId", a.AdjustmentID, "sku", a.SKU, "delta", a.Delta)
	if len(ignored) > 0 {
		log.DebugContext(ctx, "adjustment has fields this version does not know; ignored", "ignoredFields", ignored)
	}
	applied, err := h.svc.ApplyAdjustment(ctx, a)
	switch {
	case err == nil && applied:
		log.InfoContext(ctx, "stock adjusted", "reason", a.Reason)
		return nil
	case err == nil:
		log.InfoContext(ctx, "adjustment already applied; duplicate delivery ignored")
		return nil
	case errors.Is(err, shop.ErrInsufficientStock):
		// A permanent business decision, recorded by the service: succeed so that Lambda
		// does not retry it.
		log.WarnContext(ctx, "adjustment rejected: stock would go negative; rejection recorded, not retried",
			"reason", a.Reason, "error", err.Error())
		return nil
	case errors.Is(err, shop.ErrBusy), errors.Is(err, lockcore.ErrLeaseLost):
		log.WarnContext(ctx, "SKU lock contended; failing for an asynchronous retry", "error", err.Error())
		return &LockContendedError{ev.ID, err}
	case errors.Is(err, shop.ErrInvalid):
		var fe *shop.FieldError
		field := ""
		if errors.As(err, &fe) {
			field = shop.FieldPath("detail", fe.Field)
		}
		return h.invalid(ctx, log, &eventshape.InvalidEventError{Function: FunctionName, EventID: ev.ID, Err: err}, "field", field)
	}
	log.ErrorContext(ctx, "adjustment failed; failing for an asynchronous retry", "error", err.Error())
	return &AdjustmentError{ev.ID, err}
}
