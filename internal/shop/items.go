package shop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Key layout (template.yaml).
const (
	// SKULockPrefix starts the lock key of a SKU in the lock table: "sku#<sku>". Order
	// reservations and stock adjustments of one SKU both take this lock.
	SKULockPrefix = "sku#"
	// StockPKPrefix starts the inventory partition key of a SKU: "SKU#<sku>".
	StockPKPrefix = "SKU#"
	// StockSK is the sort key of a SKU's stock record.
	StockSK = "STOCK"
	// AdjustmentSKPrefix starts the sort key of an applied-adjustment marker:
	// "ADJ#<adjustmentId>".
	AdjustmentSKPrefix = "ADJ#"
)

// Attribute names of the order and stock items.
const (
	attrOrderID    = "orderId"
	attrCustomerID = "customerId"
	attrLines      = "lines"
	attrSKU        = "sku"
	attrQty        = "qty"
	attrStatus     = "status"
	attrReason     = "reason"
	attrCreatedAt  = "createdAt"
	attrUpdatedAt  = "updatedAt"
	attrPK         = "pk"
	attrSK         = "sk"
	attrAvailable  = "available"
	attrReserved   = "reserved"
	attrFence      = "fence" // highest SKU-lock fencing token that wrote the stock record
	attrExpiresAt  = "expiresAt"
	// attrOutcome of an ADJ# marker: absent (applied; markers written before rejections
	// were recorded) or OutcomeRejected.
	attrOutcome        = "outcome"
	attrRequestedDelta = "requestedDelta"
	// attrMarkerLease of an ADJ# marker: the stock lease that wrote it.
	attrMarkerLease = "leaseId"
)

// OutcomeRejected is the outcome attribute of the ADJ# marker of a rejected adjustment.
// Applied adjustments' markers carry their delta and no outcome; rejected ones carry
// requestedDelta (and no delta), so summing the delta of markers sums what was applied.
const OutcomeRejected = "REJECTED"

// SKULockKey returns the lock-table key of sku's lock.
func SKULockKey(sku string) string { return SKULockPrefix + sku }

// SKUFromLockKey returns the SKU of a lock key made by SKULockKey.
func SKUFromLockKey(key string) (string, bool) {
	sku, ok := strings.CutPrefix(key, SKULockPrefix)
	return sku, ok && sku != ""
}

func orderKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrOrderID: str(id)}
}

func stockKey(sku string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(StockPKPrefix + sku), attrSK: str(StockSK)}
}

func markerKey(sku, adjustmentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(StockPKPrefix + sku), attrSK: str(AdjustmentSKPrefix + adjustmentID)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func getS(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(it map[string]types.AttributeValue, k string) (int64, bool) {
	v, ok := it[k].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func parseLines(v types.AttributeValue) []Line {
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]Line, 0, len(l.Value))
	for _, e := range l.Value {
		m, ok := e.(*types.AttributeValueMemberM)
		if !ok {
			return nil
		}
		q, _ := getN(m.Value, attrQty)
		out = append(out, Line{SKU: getS(m.Value, attrSKU), Qty: int(q)})
	}
	return out
}

// orderRecord is an order item as stored.
type orderRecord struct {
	Order
	Status Status
	Reason string
}

func parseOrder(id string, it map[string]types.AttributeValue) orderRecord {
	r := orderRecord{Order: Order{OrderID: id}}
	if it == nil {
		return r
	}
	r.CustomerID = getS(it, attrCustomerID)
	r.Lines = parseLines(it[attrLines])
	r.Status = Status(getS(it, attrStatus))
	r.Reason = getS(it, attrReason)
	return r
}

// Order reads an order item (strongly consistent). exists is false when there is none.
// An order item that exists without a status (a holder died right after locking it) is
// reported PENDING; its Order then may lack lines.
func (s *Service) Order(ctx context.Context, orderID string) (o Order, st Status, exists bool, err error) {
	if orderID == "" {
		return Order{}, "", false, fieldErr("orderId", "must not be empty")
	}
	if s.t.Orders == "" {
		return Order{}, "", false, errors.New("shop: no orders table configured")
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Orders), Key: orderKey(orderID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Order{}, "", false, fmt.Errorf("shop: read order %s: %w", orderID, err)
	}
	if out.Item == nil {
		return Order{}, "", false, nil
	}
	r := parseOrder(orderID, out.Item)
	if r.Status == "" {
		r.Status = StatusPending
	}
	return r.Order, r.Status, true, nil
}

// OrderStatus reads an order's status (strongly consistent); see Order.
func (s *Service) OrderStatus(ctx context.Context, orderID string) (Status, bool, error) {
	_, st, ok, err := s.Order(ctx, orderID)
	return st, ok, err
}

// Stock reads a SKU's stock record (strongly consistent). A SKU without a record has
// nothing available or reserved.
func (s *Service) Stock(ctx context.Context, sku string) (available, reserved int, err error) {
	if err := ValidSKU(sku); err != nil {
		return 0, 0, fieldErr("sku", "%s", err.Error())
	}
	if s.t.Inventory == "" {
		return 0, 0, fmt.Errorf("shop: no inventory table configured")
	}
	rec, err := s.readStock(ctx, sku)
	if err != nil {
		return 0, 0, err
	}
	return int(rec.available), int(rec.reserved), nil
}

type stockRecord struct {
	exists              bool
	available, reserved int64
}

func (s *Service) readStock(ctx context.Context, sku string) (stockRecord, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Inventory), Key: stockKey(sku), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return stockRecord{}, fmt.Errorf("shop: read stock of %s: %w", sku, err)
	}
	if out.Item == nil {
		return stockRecord{}, nil
	}
	a, _ := getN(out.Item, attrAvailable)
	r, _ := getN(out.Item, attrReserved)
	return stockRecord{exists: true, available: a, reserved: r}, nil
}
