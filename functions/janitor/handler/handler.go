// Package handler is the janitor's Lambda handler. It takes two kinds of events:
//
//   - DynamoDB stream batches of the lock table, filtered (template.yaml) to deletions by
//     the TTL service. A deleted row whose lease was still held means its holder died:
//     the janitor logs it, counts it (EMF metric AbandonedLeases) and resumes the orphaned
//     work — a SKU lease carries the id of the order it was reserving, and an order that
//     is not final is sent back to the orders queue (Redriver). Records that fail are
//     reported in batchItemFailures by sequence number (the first failure ends the batch:
//     Lambda retries from it, bisecting, then hands it to the on-failure destination).
//   - The scheduled sweep (EventBridge "Scheduled Event"): TTL may lag by days, so the
//     janitor scans for lock rows whose expiresAt lies more than the minimum age in the
//     past and deletes each with a condition that its expiresAt and rev are unchanged —
//     a lease renewed or re-acquired since the scan is never deleted. Swept rows that were
//     still held are abandoned leases too, handled as above. lockcore's own rows (pk
//     "turnstile#...") and queue counters (sk "...#counter") are never touched.
//     The order processor locks stock items themselves (lockcore's locking read on the
//     inventory table), which TTL must never remove: the sweep also scans the inventory
//     table for stock items whose holder's lease ended more than the minimum age ago
//     (shop.Service.AbandonedStock), re-drives the orders recorded on each that are not
//     decided, and then takes the lock over and releases it (ClearAbandonedStock), so
//     that the next sweep does not find it again.
//
// Correctness never depends on the janitor: waiting holders take abandoned leases over on
// their own, and SQS redelivers unfinished orders. The janitor makes dead holders
// visible and shortens recovery when no message is left to retry.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// FunctionName names the function in metrics.
const FunctionName = "janitor"

// Metric names.
const (
	MetricAbandonedLeases = "AbandonedLeases" // held leases removed by TTL or the sweep
	MetricOrdersRedriven  = "OrdersRedriven"
	MetricSweptRows       = "SweptRows"    // rows the sweep deleted
	MetricSweepSkipped    = "SweepSkipped" // rows renewed or re-acquired between scan and delete
	MetricRecordsFailed   = "StreamRecordsFailed"
)

// DefaultMinAge is how long past its expiresAt a row must be before the sweep deletes it.
const DefaultMinAge = time.Hour

// Redriver sends an order back to the orders queue.
type Redriver interface {
	Redrive(ctx context.Context, o shop.Order) error
}

// RedriverFunc adapts a function to Redriver.
type RedriverFunc func(ctx context.Context, o shop.Order) error

// Redrive calls f.
func (f RedriverFunc) Redrive(ctx context.Context, o shop.Order) error { return f(ctx, o) }

// SQSSender is the part of the SQS client the SQS redriver uses.
type SQSSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// SQSRedriver sends orders to an SQS queue, as the order processor reads them.
type SQSRedriver struct {
	Client   SQSSender
	QueueURL string
}

// Redrive sends o as a message body.
func (r SQSRedriver) Redrive(ctx context.Context, o shop.Order) error {
	if r.QueueURL == "" {
		return errors.New("janitor: no orders queue URL configured (ORDERS_QUEUE_URL)")
	}
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = r.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(r.QueueURL), MessageBody: aws.String(string(body))})
	if err != nil {
		return fmt.Errorf("janitor: re-drive order %s: %w", o.OrderID, err)
	}
	return nil
}

// DB is the part of the DynamoDB API the sweep uses; *dynamodb.Client satisfies it.
type DB interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Orders reads orders; *shop.Service satisfies it.
type Orders interface {
	Order(ctx context.Context, orderID string) (shop.Order, shop.Status, bool, error)
}

// StockSweeper finds and clears abandoned stock locks; *shop.Service on the inventory
// table satisfies it (see WithStockSweep).
type StockSweeper interface {
	AbandonedStock(ctx context.Context, minAge time.Duration) ([]shop.AbandonedStock, error)
	ClearAbandonedStock(ctx context.Context, a shop.AbandonedStock, minAge time.Duration) (bool, error)
}

// Metrics is a per-invocation metrics logger; *emf.Logger satisfies it.
type Metrics interface {
	PutMetric(name string, value float64, unit emf.Unit)
	Flush() error
}

// Handler is the janitor.
type Handler struct {
	db        DB
	lockTable string
	orders    Orders
	redriver  Redriver
	log       *slog.Logger
	metrics   func(ctx context.Context) Metrics
	now       func() time.Time
	minAge    time.Duration
	found     func(l AbandonedLease, via string)
	stock     StockSweeper
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

// WithClock sets the sweep's clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithMinAge sets how long past its expiresAt a row must be before the sweep deletes it
// (default DefaultMinAge; at least 0).
func WithMinAge(d time.Duration) Option {
	return func(h *Handler) { h.minAge = max(0, d) }
}

// WithFoundHook makes the janitor call f with every abandoned lease it counts (after its
// orders were resumed), and how it was found: "ttl" (the lock table's stream), "sweep"
// (the lock-table sweep) or "stock-sweep" (an abandoned stock lock). The demo checks with
// it that every lease a crash abandoned was found.
func WithFoundHook(f func(l AbandonedLease, via string)) Option {
	return func(h *Handler) { h.found = f }
}

// WithStockSweep makes the scheduled sweep also look for abandoned stock locks with ss
// (a shop.Service on the inventory table): the order processor's and the inventory
// updater's locks on the stock items, which TTL never removes.
func WithStockSweep(ss StockSweeper) Option { return func(h *Handler) { h.stock = ss } }

// New returns a janitor of lockTable. orders reads the orders (a shop.Service on the
// lock and orders tables) and redriver sends unfinished orders back to their queue.
func New(db DB, lockTable string, orders Orders, redriver Redriver, opts ...Option) *Handler {
	h := &Handler{
		db: db, lockTable: lockTable, orders: orders, redriver: redriver,
		log:     obs.Logger(),
		metrics: func(ctx context.Context) Metrics { return obs.Metrics(ctx, FunctionName) },
		now:     time.Now,
		minAge:  DefaultMinAge,
	}
	for _, o := range opts {
		o(h)
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

// ScheduledEventType is the detail-type of EventBridge schedules.
const ScheduledEventType = eventshape.ScheduledDetailType

// want describes the events the function handles, for InvalidEventError.
const want = "a DynamoDB stream batch of the lock table (Records with eventSource \"aws:dynamodb\") or an EventBridge \"" +
	ScheduledEventType + "\" from aws.events"

// SweepError is the error Handle returns when a scheduled sweep failed (errorType
// "SweepError"); EventBridge retries the schedule's event.
type SweepError struct {
	Err error
}

func (e *SweepError) Error() string { return "janitor: sweep: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SweepError) Unwrap() error { return e.Err }

// Handle dispatches a stream batch or a scheduled sweep. For a stream batch the response
// lists the record to retry from; for a sweep it is empty and a failed sweep returns a
// *SweepError (EventBridge retries it). Any other event — empty, an SQS batch, another
// EventBridge event, records of another source — is logged at ERROR naming what it is and
// fails with an *eventshape.InvalidEventError: Lambda never delivers those to this function
// from its triggers, so a caller made a mistake, and succeeding would hide it.
func (h *Handler) Handle(ctx context.Context, raw json.RawMessage) (events.DynamoDBEventResponse, error) {
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	shape := eventshape.Classify(raw)
	if shape.Kind != eventshape.DynamoDBStream && shape.Kind != eventshape.Scheduled {
		err := &eventshape.InvalidEventError{Function: FunctionName, EventID: shape.ID, Got: shape.String(), Want: want}
		h.log.ErrorContext(ctx, "janitor: not a lock-table stream batch or a scheduled sweep; failing the invocation",
			append(shape.LogAttrs(), "error", err.Error())...)
		return resp, err
	}
	var m Metrics
	if h.metrics != nil {
		m = h.metrics(ctx)
		defer func() {
			if err := m.Flush(); err != nil {
				h.log.WarnContext(ctx, "metrics flush failed", "error", err)
			}
		}()
	}
	if shape.Kind == eventshape.Scheduled {
		res, err := h.sweep(ctx, m)
		attrs := []any{"scanned", res.Scanned, "deleted", res.Deleted, "skipped", res.Skipped, "abandoned", res.Abandoned,
			"redriven", res.Redriven, "stockLocks", res.StockLocks}
		if err != nil {
			h.log.ErrorContext(ctx, "sweep failed; EventBridge retries it", append(attrs, "error", err.Error())...)
			return resp, &SweepError{err}
		}
		h.log.InfoContext(ctx, "sweep done", attrs...)
		return resp, nil
	}
	var env struct {
		Records json.RawMessage `json:"Records"`
	}
	_ = json.Unmarshal(raw, &env) // Classify decoded it already
	return h.handleStream(ctx, env.Records, m), nil
}

// recordRef is what can be learned from a record that does not decode.
type recordRef struct {
	EventID string `json:"eventID"`
	Change  struct {
		SequenceNumber string `json:"SequenceNumber"`
	} `json:"dynamodb"`
}

func (h *Handler) handleStream(ctx context.Context, raw json.RawMessage, m Metrics) events.DynamoDBEventResponse {
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	var records []json.RawMessage
	if err := json.Unmarshal(raw, &records); err != nil {
		h.log.ErrorContext(ctx, "janitor: Records is not an array; nothing to do", "error", err.Error())
		return resp
	}
	for i, r := range records {
		var ref recordRef
		_ = json.Unmarshal(r, &ref)
		log := h.log.With("eventId", ref.EventID, "sequenceNumber", ref.Change.SequenceNumber)
		err := h.handleRecord(ctx, r, log, m)
		if err == nil {
			continue
		}
		put(m, MetricRecordsFailed, 1)
		if ref.Change.SequenceNumber == "" {
			// Without a sequence number the record cannot be named, and retrying it
			// cannot help: log it and go on.
			log.ErrorContext(ctx, "stream record failed and has no sequence number; skipped", "index", i, "error", err.Error())
			continue
		}
		log.ErrorContext(ctx, "stream record failed; the batch is retried from it", "index", i, "error", err.Error())
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: ref.Change.SequenceNumber})
		break // Lambda retries from the first failure: later records come again
	}
	return resp
}

func (h *Handler) handleRecord(ctx context.Context, raw json.RawMessage, log *slog.Logger, m Metrics) error {
	var rec events.DynamoDBEventRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return malformed("%v", err)
	}
	lease, ok, err := DecodeRecord(rec)
	if err != nil {
		return err
	}
	if !ok {
		log.DebugContext(ctx, "not an abandoned lease", "eventName", rec.EventName)
		return nil
	}
	_, err = h.abandoned(ctx, lease, "ttl", log, m)
	return err
}

// abandoned reports an abandoned lease and resumes its work; redriven says whether an
// order was sent back to the queue. The lease is counted (AbandonedLeases) once its work
// is resumed: a record that fails is retried by Lambda, and one lease must count once.
func (h *Handler) abandoned(ctx context.Context, l AbandonedLease, via string, log *slog.Logger, m Metrics) (redriven bool, err error) {
	log = h.report(ctx, l, via, log)
	if redriven, err = h.resumeAll(ctx, l, log, m); err != nil {
		return redriven, err
	}
	h.count(l, via, m)
	return redriven, nil
}

// count counts an abandoned lease whose work was resumed.
func (h *Handler) count(l AbandonedLease, via string, m Metrics) {
	put(m, MetricAbandonedLeases, 1)
	if h.found != nil {
		h.found(l, via)
	}
}

// report logs an abandoned lease and returns log with the lease's attributes.
func (h *Handler) report(ctx context.Context, l AbandonedLease, via string, log *slog.Logger) *slog.Logger {
	log = leaseLog(log, l, via)
	if ids := leaseOrders(l); len(ids) > 0 {
		log.WarnContext(ctx, "abandoned lease found: its holder died holding it", "orderIds", ids)
	} else {
		log.WarnContext(ctx, "abandoned lease found: its holder died holding it; no order to resume")
	}
	return log
}

func leaseLog(log *slog.Logger, l AbandonedLease, via string) *slog.Logger {
	return log.With("lock", l.Key, "namespace", l.Namespace, "owner", l.Owner, "leaseId", l.LeaseID,
		"leaseEnd", l.Until, "removedBy", via)
}

// leaseOrders returns the orders whose work l protected.
func leaseOrders(l AbandonedLease) []string {
	if len(l.OrderIDs) == 0 && l.OrderID != "" {
		return []string{l.OrderID}
	}
	return l.OrderIDs
}

// resumeAll re-drives every order of an abandoned lease that is not decided; redriven
// says whether one was sent back to the queue.
func (h *Handler) resumeAll(ctx context.Context, l AbandonedLease, log *slog.Logger, m Metrics) (redriven bool, err error) {
	for _, id := range leaseOrders(l) {
		r, err := h.resume(ctx, id, log.With("orderId", id), m)
		if err != nil {
			return redriven, err
		}
		redriven = redriven || r
	}
	return redriven, nil
}

// resume re-drives one order of an abandoned lease unless it is decided or unknown.
func (h *Handler) resume(ctx context.Context, id string, log *slog.Logger, m Metrics) (bool, error) {
	return h.resumeOrder(ctx, shop.Order{OrderID: id}, log, m)
}

// resumeOrder re-drives an order of an abandoned lease unless it is decided. rec is the
// order as the lease recorded it (only its id, for a lock-table lease): the version the
// order item stores wins when there is one (the first version seen), and an order that
// neither stores nor records lines is unknown.
func (h *Handler) resumeOrder(ctx context.Context, rec shop.Order, log *slog.Logger, m Metrics) (bool, error) {
	id := rec.OrderID
	o, st, exists, err := h.orders.Order(ctx, id)
	switch {
	case err != nil:
		return false, fmt.Errorf("janitor: read order %s: %w", id, err)
	case exists && st.Final():
		log.InfoContext(ctx, "order already decided; nothing to resume", "status", string(st))
		return false, nil
	case !exists || len(o.Lines) == 0:
		if len(rec.Lines) == 0 {
			log.WarnContext(ctx, "order of the abandoned lease does not exist; nothing to resume")
			return false, nil
		}
		o, st = rec, shop.StatusPending
	}
	o.OrderID = id
	if err := o.Validate(); err != nil {
		log.ErrorContext(ctx, "order of the abandoned lease cannot be re-driven", "error", err.Error())
		return false, nil // retrying cannot help; the orders queue still redelivers the original
	}
	if err := h.redriver.Redrive(ctx, o); err != nil {
		return false, err
	}
	put(m, MetricOrdersRedriven, 1)
	log.InfoContext(ctx, "order re-driven to the orders queue", "status", string(st))
	return true, nil
}

func put(m Metrics, name string, v float64) {
	if m != nil {
		m.PutMetric(name, v, emf.Count)
	}
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	Scanned   int // rows read (after the filter)
	Deleted   int // rows deleted
	Skipped   int // rows renewed, re-acquired or released since the scan: kept
	Abandoned int // deleted rows whose lease was still held, and abandoned stock locks cleared
	Redriven  int // orders re-driven
	// StockLocks are the stock items found locked by a lease that ended more than the
	// minimum age ago; Abandoned counts those cleared.
	StockLocks int
}

// Sweep runs the sweep outside a Lambda invocation (tools, demos, tests).
func (h *Handler) Sweep(ctx context.Context) (SweepResult, error) { return h.sweep(ctx, nil) }

func (h *Handler) sweep(ctx context.Context, m Metrics) (SweepResult, error) {
	res, err := h.sweepLocks(ctx, m)
	if err != nil {
		return res, err
	}
	if h.stock != nil {
		err = h.sweepStock(ctx, h.stock, &res, m)
	}
	return res, err
}

// sweepStock resumes the orders of every abandoned stock lock and clears the lock.
func (h *Handler) sweepStock(ctx context.Context, ss StockSweeper, res *SweepResult, m Metrics) error {
	found, err := ss.AbandonedStock(ctx, h.minAge)
	if err != nil {
		return fmt.Errorf("janitor: sweep stock: %w", err)
	}
	for _, a := range found {
		res.StockLocks++
		l := AbandonedLease{Key: shop.StockPKPrefix + a.SKU, Namespace: shop.StockSK, Owner: a.Owner, LeaseID: a.LeaseID, Until: a.Until}
		for _, o := range a.Orders {
			l.OrderIDs = append(l.OrderIDs, o.OrderID)
		}
		if len(l.OrderIDs) > 0 {
			l.OrderID = l.OrderIDs[0]
		}
		log := leaseLog(h.log, l, "stock-sweep")
		redriven := false
		for _, o := range a.Orders {
			r, err := h.resumeOrder(ctx, o, log.With("orderId", o.OrderID), m)
			if err != nil {
				log.ErrorContext(ctx, "sweep kept an abandoned stock lock whose orders could not be resumed; the next sweep tries again",
					"error", err.Error())
				return nil
			}
			if r {
				res.Redriven++
				redriven = true
			}
		}
		cleared, err := ss.ClearAbandonedStock(ctx, a, h.minAge)
		if err != nil {
			log.ErrorContext(ctx, "sweep could not clear an abandoned stock lock; the next sweep finds it again", "error", err.Error())
			continue
		}
		if !cleared {
			log.InfoContext(ctx, "abandoned stock lock was taken by a live holder meanwhile", "redriven", redriven)
		}
		res.Abandoned++
		h.report(ctx, l, "stock-sweep", h.log)
		h.count(l, "stock-sweep", m)
	}
	return nil
}

// sweepLocks sweeps the lock table (see the package doc).
func (h *Handler) sweepLocks(ctx context.Context, m Metrics) (SweepResult, error) {
	var res SweepResult
	cutoff := h.now().Add(-h.minAge).Unix()
	e, err := expression.NewBuilder().WithFilter(expression.And(
		expression.Name("expiresAt").LessThan(expression.Value(cutoff)),
		expression.Not(expression.Name("pk").BeginsWith(reservedPrefix)),
	)).Build()
	if err != nil {
		return res, fmt.Errorf("janitor: sweep filter: %w", err)
	}
	var start map[string]types.AttributeValue
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*time.Second {
			h.log.WarnContext(ctx, "sweep stopped early: invocation deadline near; the next sweep continues")
			return res, nil
		}
		out, err := h.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(h.lockTable),
			FilterExpression:          e.Filter(),
			ExpressionAttributeNames:  e.Names(),
			ExpressionAttributeValues: e.Values(),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return res, fmt.Errorf("janitor: sweep scan: %w", err)
		}
		for _, it := range out.Items {
			res.Scanned++
			if err := h.sweepRow(ctx, it, &res, m); err != nil {
				return res, err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return res, nil
		}
		start = out.LastEvaluatedKey
	}
}

// sweepRow deletes one expired row unless it changed since it was read.
func (h *Handler) sweepRow(ctx context.Context, it map[string]types.AttributeValue, res *SweepResult, m Metrics) error {
	pk, _ := it["pk"].(*types.AttributeValueMemberS)
	sk, _ := it["sk"].(*types.AttributeValueMemberS)
	exp, _ := it["expiresAt"].(*types.AttributeValueMemberN)
	if pk == nil || sk == nil || exp == nil ||
		strings.HasPrefix(pk.Value, reservedPrefix) || strings.HasSuffix(sk.Value, counterSuffix) {
		return nil
	}
	// A held lease's work is resumed before its row goes: the sweep's deletion is no TTL
	// deletion, so no stream record names the lease again, and once the row is gone no
	// later sweep finds it either. A re-drive that fails keeps the row for the next sweep
	// (the order's own message may be gone: its receives used up). Should the delete then
	// find the row renewed, the re-drive was a duplicate, which order processing ignores.
	l, held := decodeLockImage(streamImage(it), pk.Value, sk.Value)
	redriven := false
	if held {
		r, err := h.resumeAll(ctx, l, leaseLog(h.log, l, "sweep"), m)
		if err != nil {
			h.log.ErrorContext(ctx, "sweep kept an abandoned lease whose work could not be resumed; the next sweep tries again",
				"lock", l.Key, "namespace", l.Namespace, "error", err.Error())
			return nil
		}
		redriven = r
	}
	// Unchanged since the scan: same expiry (renewals and releases move it) and same
	// lease version (every acquisition and renewal bumps it).
	cond := expression.Name("expiresAt").Equal(expression.Value(exp))
	if rev, ok := it["rev"]; ok {
		cond = cond.And(expression.Name("rev").Equal(expression.Value(rev)))
	} else {
		cond = cond.And(expression.Name("rev").AttributeNotExists())
	}
	e, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("janitor: sweep condition: %w", err)
	}
	_, err = h.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(h.lockTable),
		Key:                       map[string]types.AttributeValue{"pk": pk, "sk": sk},
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		res.Skipped++
		put(m, MetricSweepSkipped, 1)
		h.log.InfoContext(ctx, "sweep kept a row that changed since the scan", "lock", pk.Value, "namespace", sk.Value)
		return nil
	case err != nil:
		return fmt.Errorf("janitor: sweep delete %s/%s: %w", pk.Value, sk.Value, err)
	}
	res.Deleted++
	put(m, MetricSweptRows, 1)
	if !held {
		return nil
	}
	res.Abandoned++
	h.report(ctx, l, "sweep", h.log)
	h.count(l, "sweep", m)
	if redriven {
		res.Redriven++
	}
	return nil
}
