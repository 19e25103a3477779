// Package handler is the inventory updater's Lambda handler: StockAdjusted events from
// EventBridge, applied by shop.Service.ApplyAdjustment under the SKU's lock, once per
// adjustment id, never letting available stock go negative.
//
// Errors: EventBridge invokes the function asynchronously, so a returned error makes
// Lambda retry the event (MaximumRetryAttempts in the template's EventInvokeConfig) and
// then hand it to the on-failure destination (the inventory DLQ). Handle returns an error
// for a malformed event (naming the field), for an event of another detail-type, for an
// adjustment that would make stock negative (shop.ErrInsufficientStock: it stays visible
// in the DLQ for a human instead of being dropped), and for contention or transient
// failures (retried). A duplicate delivery is a success.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
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

// EventError is the error Handle returns: the event's id and why it failed. Lambda
// reports it (errorType "EventError") to the on-failure destination.
type EventError struct {
	EventID string
	Err     error
}

func (e *EventError) Error() string {
	return "inventoryupdater: event " + e.EventID + ": " + e.Err.Error()
}

// Unwrap returns the cause (matching shop.ErrInvalid, shop.ErrInsufficientStock,
// shop.ErrBusy, ...).
func (e *EventError) Unwrap() error { return e.Err }

// Handle applies one StockAdjusted event; see the package documentation for its errors.
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
	if ev.DetailType != DetailType {
		log.ErrorContext(ctx, "unexpected event detail-type", "want", DetailType)
		return &EventError{ev.ID, fmt.Errorf("detail-type %q, want %q", ev.DetailType, DetailType)}
	}
	a, err := shop.DecodeAdjustment(ev.Detail)
	if err != nil {
		attrs := []any{"error", err.Error()}
		var fe *shop.FieldError
		if errors.As(err, &fe) {
			attrs = append(attrs, "field", "detail."+fe.Field, "reason", fe.Reason)
		}
		log.ErrorContext(ctx, "malformed StockAdjusted event", attrs...)
		return &EventError{ev.ID, fmt.Errorf("detail.%w", err)}
	}
	log = log.With("adjustmentId", a.AdjustmentID, "sku", a.SKU, "delta", a.Delta)
	applied, err := h.svc.ApplyAdjustment(ctx, a)
	switch {
	case err == nil && applied:
		log.InfoContext(ctx, "stock adjusted", "reason", a.Reason)
		return nil
	case err == nil:
		log.InfoContext(ctx, "adjustment already applied; duplicate delivery ignored")
		return nil
	case errors.Is(err, shop.ErrInsufficientStock):
		log.ErrorContext(ctx, "adjustment rejected: stock would go negative", "error", err.Error())
	case errors.Is(err, shop.ErrBusy):
		log.WarnContext(ctx, "SKU lock contended; failing for an asynchronous retry", "error", err.Error())
	default:
		log.ErrorContext(ctx, "adjustment failed", "error", err.Error())
	}
	return &EventError{ev.ID, err}
}
