package handler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// Lock-table conventions of lockcore (see lockcore's Mutex and Queue).
const (
	reservedPrefix = "turnstile#" // lockcore's own rows (fence epoch keepers)
	counterSuffix  = "#counter"   // queue ticket counters: never expire, never swept
	stateHeld      = "held"       // a held row of lockcore's previous Mutex format
	stateFair      = "fair"       // a Mutex row in lockcore's ticket format
	waiterPrefix   = "w#"         // ticket format: w#<id> = the ticket of lease "<owner>#<id>"
	detailPrefix   = "d#"         // ticket format: d#<id> = data (first release: [owner, lease ms, data])
	// OrderLockPrefix starts a lock key that names an order directly: "order#<id>".
	OrderLockPrefix = "order#"
	// TTLPrincipal is the principal of deletions made by DynamoDB's TTL service.
	TTLPrincipal = "dynamodb.amazonaws.com"
)

// AbandonedLease is a lock row whose lease was still held when it was removed: its
// holder died (or stopped renewing) and never released it.
type AbandonedLease struct {
	Key       string    // lock key (pk)
	Namespace string    // namespace / row (sk)
	Owner     string    // owner name of the dead holder
	LeaseID   string    // its lease id
	Until     time.Time // its recorded lease end (zero if absent)
	Data      []byte    // data stored with the lease
	OrderID   string    // the (first) order whose work the lease protected; "" if none
	// OrderIDs are every order the lease protected: a SKU lease taken for an SQS batch
	// (shop.ProcessOrders) names the orders of its group, one per line.
	OrderIDs []string
}

// String describes the lease for logs.
func (l AbandonedLease) String() string {
	return fmt.Sprintf("%s/%s (owner %q, lease %q)", l.Key, l.Namespace, l.Owner, l.LeaseID)
}

// ErrMalformedRecord matches the errors of DecodeRecord.
var ErrMalformedRecord = errors.New("janitor: malformed stream record")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedRecord, fmt.Sprintf(format, args...))
}

// IsTTLDeletion reports whether a stream record is a deletion by DynamoDB's TTL service
// (eventName REMOVE, userIdentity {type Service, principalId dynamodb.amazonaws.com}).
func IsTTLDeletion(rec events.DynamoDBEventRecord) bool {
	return rec.EventName == "REMOVE" && rec.UserIdentity != nil &&
		rec.UserIdentity.Type == "Service" && rec.UserIdentity.PrincipalID == TTLPrincipal
}

// DecodeRecord returns the abandoned lease a lock-table stream record reports. ok is
// false for records that report none: anything but a TTL deletion, a row that was not
// held (a released lock expiring normally), and lockcore's bookkeeping rows. An error
// (matching ErrMalformedRecord) means a TTL deletion whose old image is not a lock row.
// It never panics, whatever the record holds.
func DecodeRecord(rec events.DynamoDBEventRecord) (lease AbandonedLease, ok bool, err error) {
	if !IsTTLDeletion(rec) {
		return AbandonedLease{}, false, nil
	}
	img := rec.Change.OldImage
	if img == nil {
		return AbandonedLease{}, false, malformed("TTL deletion without an old image (stream view type %q)", rec.Change.StreamViewType)
	}
	pk, okPK := imgString(img, "pk")
	sk, okSK := imgString(img, "sk")
	if !okPK || !okSK || pk == "" || sk == "" {
		return AbandonedLease{}, false, malformed("old image lacks the string keys pk and sk")
	}
	if strings.HasPrefix(pk, reservedPrefix) || strings.HasSuffix(sk, counterSuffix) {
		return AbandonedLease{}, false, nil
	}
	l, held := decodeLockImage(img, pk, sk)
	return l, held, nil
}

// HeldLease returns the lease a lock-table row image records as held, in either of
// lockcore's Mutex formats (ok false: none, or not a lock row).
func HeldLease(img map[string]events.DynamoDBAttributeValue) (lease AbandonedLease, ok bool) {
	pk, okPK := imgString(img, "pk")
	sk, okSK := imgString(img, "sk")
	if !okPK || !okSK || strings.HasPrefix(pk, reservedPrefix) || strings.HasSuffix(sk, counterSuffix) {
		return AbandonedLease{}, false
	}
	return decodeLockImage(img, pk, sk)
}

// HeldLeaseOfItem is HeldLease of an item read from the lock table.
func HeldLeaseOfItem(it map[string]types.AttributeValue) (AbandonedLease, bool) {
	return HeldLease(streamImage(it))
}

// decodeLockImage returns the lease a Mutex row (in either of lockcore's formats) records
// as held; held is false when it records none.
func decodeLockImage(img map[string]events.DynamoDBAttributeValue, pk, sk string) (lease AbandonedLease, held bool) {
	state, _ := imgString(img, "state")
	if state == stateFair {
		return decodeFair(img, pk, sk)
	}
	if state != stateHeld {
		return AbandonedLease{}, false
	}
	l := AbandonedLease{Key: pk, Namespace: sk}
	l.Owner, _ = imgString(img, "owner")
	l.LeaseID, _ = imgString(img, "leaseId")
	if ms, ok := imgInt(img, "until"); ok {
		l.Until = time.UnixMilli(ms)
	}
	l.Data = imgBytes(img, "data")
	l.OrderIDs = OrderIDsOf(pk, l.Data)
	l.OrderID = OrderIDOf(pk, l.Data)
	return l, true
}

// streamImage converts an item read from the table to the stream's image form (the
// attribute kinds lock rows use; others are left out).
func streamImage(it map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	img := make(map[string]events.DynamoDBAttributeValue, len(it))
	for k, v := range it {
		if a, ok := streamValue(v); ok {
			img[k] = a
		}
	}
	return img
}

func streamValue(v types.AttributeValue) (events.DynamoDBAttributeValue, bool) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(x.Value), true
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(x.Value), true
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(x.Value), true
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, 0, len(x.Value))
		for _, e := range x.Value {
			if a, ok := streamValue(e); ok {
				l = append(l, a)
			}
		}
		return events.NewListAttribute(l), true
	}
	return events.DynamoDBAttributeValue{}, false
}

// decodeFair decodes a Mutex row in lockcore's ticket format: the lease is the served
// ticket's, when one is served and its entry is there (w#<id> = the ticket, d#<id> =
// its data if it has any). Its owner is hOwner when hFor names the served ticket (rows
// of the first ticket-format release: d#<id> = [owner, lease ms, data]); the lease id is
// "<owner>#<id>", or "ticket N" when no owner is recorded (as lockcore reports it).
func decodeFair(img map[string]events.DynamoDBAttributeValue, pk, sk string) (AbandonedLease, bool) {
	serving, ok1 := imgInt(img, "serving")
	issued, ok2 := imgInt(img, "fence")
	if !ok1 || !ok2 || serving > issued {
		return AbandonedLease{}, false // nobody holds it
	}
	for k := range img {
		id, isEntry := strings.CutPrefix(k, waiterPrefix)
		if !isEntry {
			continue
		}
		if tk, ok := imgInt(img, k); !ok || tk != serving {
			continue
		}
		l := AbandonedLease{Key: pk, Namespace: sk}
		if d, ok := img[detailPrefix+id]; ok {
			switch d.DataType() {
			case events.DataTypeBinary:
				l.Data = d.Binary()
			case events.DataTypeList:
				parts := d.List()
				if len(parts) > 0 && parts[0].DataType() == events.DataTypeString {
					l.Owner = parts[0].String()
				}
				if len(parts) > 2 && parts[2].DataType() == events.DataTypeBinary {
					l.Data = parts[2].Binary()
				}
			}
		}
		if f, ok := imgInt(img, "hFor"); ok && f == serving {
			if ms, ok := imgInt(img, "hUntil"); ok {
				l.Until = time.UnixMilli(ms)
			}
			if o, ok := img["hOwner"]; ok && o.DataType() == events.DataTypeString && o.String() != "" {
				l.Owner = o.String()
			}
		}
		if l.Owner != "" {
			l.LeaseID = l.Owner + "#" + id
		} else {
			l.LeaseID = "ticket " + strconv.FormatInt(serving, 10)
		}
		l.OrderIDs = OrderIDsOf(pk, l.Data)
		l.OrderID = OrderIDOf(pk, l.Data)
		return l, true
	}
	return AbandonedLease{}, false // the served ticket was withdrawn: nobody holds it
}

// OrderIDOf returns the order a lease on key protected: the lease's data for a SKU lock
// ("sku#<sku>", whose leases carry their order id), the key's suffix for "order#<id>".
// It returns "" when the lease names no valid order id.
func OrderIDOf(key string, data []byte) string {
	if ids := OrderIDsOf(key, data); len(ids) > 0 {
		return ids[0]
	}
	return ""
}

// OrderIDsOf returns every order a lease on key protected: for a SKU lock the ids in its
// data (one, or a batch's group separated by shop.BatchDataSeparator), for "order#<id>"
// the key's suffix. Ids that are not valid order ids are left out.
func OrderIDsOf(key string, data []byte) []string {
	var raw []string
	switch {
	case strings.HasPrefix(key, OrderLockPrefix):
		raw = []string{strings.TrimPrefix(key, OrderLockPrefix)}
	case strings.HasPrefix(key, shop.SKULockPrefix):
		raw = strings.Split(string(data), shop.BatchDataSeparator)
	}
	var ids []string
	for _, id := range raw {
		if id != "" && len(id) <= shop.MaxIDBytes && utf8.ValidString(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

func imgString(img map[string]events.DynamoDBAttributeValue, k string) (string, bool) {
	v, ok := img[k]
	if !ok || v.DataType() != events.DataTypeString {
		return "", false
	}
	return v.String(), true
}

func imgInt(img map[string]events.DynamoDBAttributeValue, k string) (int64, bool) {
	v, ok := img[k]
	if !ok || v.DataType() != events.DataTypeNumber {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Number(), 10, 64)
	return n, err == nil
}

// imgBytes reads a binary attribute (lockcore's data), or a string one.
func imgBytes(img map[string]events.DynamoDBAttributeValue, k string) []byte {
	v, ok := img[k]
	if !ok {
		return nil
	}
	switch v.DataType() {
	case events.DataTypeBinary:
		return v.Binary()
	case events.DataTypeString:
		return []byte(v.String())
	}
	return nil
}
