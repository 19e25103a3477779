package demo

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestTransactWCU pins the transaction rule of the demo's meter: DynamoDB Local reports 2
// CU per table whatever the number of items, AWS bills 2 WCU per item and KB.
func TestTransactWCU(t *testing.T) {
	in := func(n int) *dynamodb.TransactWriteItemsInput {
		return &dynamodb.TransactWriteItemsInput{TransactItems: make([]types.TransactWriteItem, n)}
	}
	out := func(units ...float64) *dynamodb.TransactWriteItemsOutput {
		o := &dynamodb.TransactWriteItemsOutput{}
		for _, u := range units {
			o.ConsumedCapacity = append(o.ConsumedCapacity, types.ConsumedCapacity{CapacityUnits: aws.Float64(u)})
		}
		return o
	}
	for _, c := range []struct {
		name   string
		params any
		result any
		want   float64
	}{
		{"DynamoDB Local: 2 per table for 12 items", in(12), out(2, 2), 24},
		{"one item", in(1), out(2), 2},
		{"the service's larger figure (items over 1 KB)", in(2), out(10), 10},
		{"cancelled: 2 per item", in(5), nil, 10},
		{"not a transaction", &dynamodb.PutItemInput{}, nil, 0},
	} {
		if got := transactWCU(c.params, c.result); got != c.want {
			t.Errorf("%s: transactWCU = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBatchGetRCU pins the BatchGetItem floor of the meter: every processed key is
// billed as a read, found or not; unprocessed keys are not.
func TestBatchGetRCU(t *testing.T) {
	keys := func(n int) []map[string]types.AttributeValue { return make([]map[string]types.AttributeValue, n) }
	in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		"orders":    {Keys: keys(4), ConsistentRead: aws.Bool(true)},
		"inventory": {Keys: keys(3)}, // eventually consistent: 0.5 each
	}}
	if got := batchGetRCU(in, &dynamodb.BatchGetItemOutput{}); got != 5.5 {
		t.Errorf("all processed: %v RCU, want 5.5", got)
	}
	out := &dynamodb.BatchGetItemOutput{UnprocessedKeys: map[string]types.KeysAndAttributes{"orders": {Keys: keys(3)}}}
	if got := batchGetRCU(in, out); got != 2.5 {
		t.Errorf("3 orders unprocessed: %v RCU, want 2.5", got)
	}
}

// A batch's calls are divided among its orders' attempts without losing the remainder
// (integer division dropped up to len-1 calls per batch from the per-attempt figures:
// about 9 % of them in the demo, found by an outside review).
func TestSplitCallsAddsUp(t *testing.T) {
	for _, c := range []struct {
		n int64
		k int
	}{{0, 3}, {7, 3}, {9, 3}, {2, 10}, {123, 7}, {5, 1}, {5, 0}} {
		got := splitCalls(c.n, c.k)
		var sum, lo, hi int64 = 0, c.n, 0
		for _, x := range got {
			sum += x
			lo, hi = min(lo, x), max(hi, x)
		}
		if c.k > 0 && (sum != c.n || hi-lo > 1) {
			t.Errorf("splitCalls(%d, %d) = %v: sum %d, spread %d", c.n, c.k, got, sum, hi-lo)
		}
	}
}
