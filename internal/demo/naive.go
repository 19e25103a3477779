package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// naiveStore is the baseline: the read-then-write code the articles warn about. It keeps
// the same items as the real service (orders with a status, stock records with available
// and reserved, applied-adjustment markers) and checks the same things (is the order new,
// is there enough stock, would an adjustment make stock negative) — but it checks on what
// it read and then writes what it computed, with no lock and no condition. Reads are
// DynamoDB's default, eventually consistent ones.
//
// Every stock write also sets ver = (the ver it read) + 1, computed the same way as the
// stock figures: it changes nothing about the race, but makes each lost update visible
// as a version number written twice.
//
// It exists only to be measured; it must never be used for anything else.
type naiveStore struct {
	db        *dynamodb.Client
	orders    string
	inventory string
	crash     func(point string) error
}

type naiveStock struct {
	available, reserved, ver int64
	exists                   bool
}

func (n *naiveStore) stock(ctx context.Context, sku string) (naiveStock, error) {
	out, err := n.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(n.inventory),
		Key:       map[string]types.AttributeValue{"pk": s("SKU#" + sku), "sk": s("STOCK")},
	})
	if err != nil {
		return naiveStock{}, err
	}
	if out.Item == nil {
		return naiveStock{}, nil
	}
	return naiveStock{
		available: nAttr(out.Item, "available"), reserved: nAttr(out.Item, "reserved"),
		ver: nAttr(out.Item, "ver"), exists: true,
	}, nil
}

func (n *naiveStore) writeStock(ctx context.Context, sku string, st naiveStock) error {
	_, err := n.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(n.inventory),
		Key:              map[string]types.AttributeValue{"pk": s("SKU#" + sku), "sk": s("STOCK")},
		UpdateExpression: aws.String("SET available = :a, reserved = :r, ver = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":a": nv(st.available), ":r": nv(st.reserved), ":v": nv(st.ver),
		},
	})
	return err
}

func (n *naiveStore) seed(ctx context.Context, sku string, available int) error {
	return n.writeStock(ctx, sku, naiveStock{available: int64(available)})
}

// processOrder: read the order; if not decided, read the stock of each line; if enough,
// write each stock record and then the order.
func (n *naiveStore) processOrder(ctx context.Context, o shop.Order) error {
	out, err := n.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(n.orders), Key: map[string]types.AttributeValue{"orderId": s(o.OrderID)},
	})
	if err != nil {
		return err
	}
	if st := sAttr(out.Item, "status"); st == "RESERVED" || st == "REJECTED" {
		return nil // already processed (as far as this read can tell)
	}
	stocks := make([]naiveStock, len(o.Lines))
	var short []string
	for i, l := range o.Lines {
		if stocks[i], err = n.stock(ctx, l.SKU); err != nil {
			return err
		}
		if stocks[i].available < int64(l.Qty) {
			short = append(short, l.SKU)
		}
	}
	if n.crash != nil {
		if err := n.crash(shop.CrashStockLocked); err != nil {
			return err
		}
	}
	status, reason := "RESERVED", ""
	if len(short) > 0 {
		status, reason = "REJECTED", "insufficient stock: "+strings.Join(short, ", ")
	} else {
		for i, l := range o.Lines {
			st := stocks[i]
			st.available -= int64(l.Qty)
			st.reserved += int64(l.Qty)
			st.ver++
			if err := n.writeStock(ctx, l.SKU, st); err != nil {
				return err
			}
		}
	}
	lines := make([]types.AttributeValue, len(o.Lines))
	for i, l := range o.Lines {
		lines[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"sku": s(l.SKU), "qty": nv(int64(l.Qty))}}
	}
	item := map[string]types.AttributeValue{
		"orderId": s(o.OrderID), "customerId": s(o.CustomerID), "status": s(status),
		"lines": &types.AttributeValueMemberL{Value: lines},
	}
	if reason != "" {
		item["reason"] = s(reason)
	}
	_, err = n.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(n.orders), Item: item})
	return err
}

// applyAdjustment: read the marker; if absent, read the stock, check, write the stock
// and then the marker.
func (n *naiveStore) applyAdjustment(ctx context.Context, a shop.Adjustment) error {
	mk := map[string]types.AttributeValue{"pk": s("SKU#" + a.SKU), "sk": s("ADJ#" + a.AdjustmentID)}
	out, err := n.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(n.inventory), Key: mk})
	if err != nil {
		return err
	}
	if out.Item != nil {
		return nil
	}
	st, err := n.stock(ctx, a.SKU)
	if err != nil {
		return err
	}
	if st.available+int64(a.Delta) < 0 {
		return fmt.Errorf("%w: %s has %d available, delta %d", shop.ErrInsufficientStock, a.SKU, st.available, a.Delta)
	}
	st.available += int64(a.Delta)
	st.ver++
	if err := n.writeStock(ctx, a.SKU, st); err != nil {
		return err
	}
	mk["adjustmentId"] = s(a.AdjustmentID)
	mk["delta"] = nv(int64(a.Delta))
	_, err = n.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(n.inventory), Item: mk})
	return err
}

// naiveOrderHandler has the order processor's handler shape.
type naiveOrderHandler struct {
	st    *naiveStore
	q     *queue        // for ChangeMessageVisibility of malformed messages
	retry time.Duration // their delay
}

func (h naiveOrderHandler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for _, m := range ev.Records {
		o, err := shop.DecodeOrder([]byte(m.Body))
		malformed := err != nil
		if err == nil {
			err = h.st.processOrder(ctx, o)
		}
		if err != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			if malformed && h.q != nil {
				// As the real handler does: a malformed message comes back soon, on its way
				// to the dead-letter queue.
				_, _ = h.q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(h.q.url()), ReceiptHandle: aws.String(m.ReceiptHandle),
					VisibilityTimeout: int32(h.retry / time.Second),
				})
			}
		}
	}
	return resp, nil
}

// naiveAdjustmentHandler has the inventory updater's handler shape.
type naiveAdjustmentHandler struct{ st *naiveStore }

func (h naiveAdjustmentHandler) Handle(ctx context.Context, ev events.EventBridgeEvent) error {
	if ev.DetailType != "StockAdjusted" {
		return errors.New("naive: unexpected detail-type")
	}
	a, err := shop.DecodeAdjustment(ev.Detail)
	if err != nil {
		return err
	}
	return h.st.applyAdjustment(ctx, a)
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func nv(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func nAttr(it map[string]types.AttributeValue, k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}
