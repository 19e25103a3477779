package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/turnstile-locks/turnstile/internal/ctxtime"
	"github.com/turnstile-locks/turnstile/internal/stack"
)

// The user identity DynamoDB puts on the stream records of its TTL deletions.
const (
	ttlIdentityType      = "Service"
	ttlIdentityPrincipal = "dynamodb.amazonaws.com"
)

// ddbLocalTTLEventName is the eventName DynamoDB Local (3.x, built on the AWS SDK for Java
// v2) writes for the stream records of its own TTL deletions: the SDK enum's placeholder
// for a value it cannot name, where AWS writes "REMOVE". Such records carry no
// userIdentity. A user's DeleteItem is recorded as "REMOVE", also without userIdentity —
// in AWS and in DynamoDB Local alike.
const ddbLocalTTLEventName = "UNKNOWN_TO_SDK_VERSION"

// streamHandler is the janitor's handler shape.
type streamHandler interface {
	Handle(ctx context.Context, ev json.RawMessage) (events.DynamoDBEventResponse, error)
}

// streamMapping is a local stand-in for Lambda's DynamoDB Streams event source mapping
// of the janitor: it reads the lock table's stream with DescribeStream, GetShardIterator
// and GetRecords, turns the records into the JSON Lambda delivers (events.DynamoDBEvent),
// applies the mapping's FilterCriteria from template.yaml, and invokes the handler with
// batches of up to batchSize records (waiting up to window for a batch to fill). Records
// the handler reports in batchItemFailures are retried from the first failed one; a
// failing invocation is bisected (BisectBatchOnFunctionError); after maxRetries a batch
// goes to the on-failure destination (counted).
//
// TTL deletions: DynamoDB Local does expire items itself (a background job that scans
// tables with TTL enabled), but it records the deletion as eventName
// "UNKNOWN_TO_SDK_VERSION" without userIdentity, where AWS records "REMOVE" with
// userIdentity {type: Service, principalId: dynamodb.amazonaws.com} — the identity the
// template's filter selects. The mapping rewrites exactly those records, and only when
// they prove to be TTL deletions: an old image and no new image, with the TTL attribute at
// or before the time the record was read. Nothing a client can do produces that eventName.
// When the engine does not expire an item within ttlFallbackAfter of its expiry (an engine
// without TTL), a ttlEmulator deletes it and its REMOVE record (matched by key and TTL
// value) gets the service identity; those deletions are counted apart as emulated.
type streamMapping struct {
	sc         *dynamodbstreams.Client
	streamArn  string
	ttlAttr    string
	filters    []any
	h          streamHandler
	function   string
	batchSize  int
	window     time.Duration
	poll       time.Duration
	maxRetries int
	timeout    time.Duration
	emulated   *ttlEmulator

	// observe sees every record (before filtering), in stream order per shard.
	observe func(rec map[string]any)

	recordsRead, filteredOut, delivered     atomic.Int64
	ttlEngine, ttlEngineNative, ttlEmulated atomic.Int64
	unrecognised                            atomic.Int64
	invocations, failedInvocations          atomic.Int64
	retriedRecords, deadLettered            atomic.Int64
	lastRecord                              atomic.Int64 // unix ms of the last record read
}

func newStreamMapping(sc *dynamodbstreams.Client, streamArn, ttlAttr string, h streamHandler, function string, filters []any) *streamMapping {
	return &streamMapping{
		sc: sc, streamArn: streamArn, ttlAttr: ttlAttr, h: h, function: function,
		filters: filters, batchSize: 100, window: 500 * time.Millisecond, poll: 200 * time.Millisecond,
		maxRetries: 5, timeout: 60 * time.Second,
	}
}

// janitorFilters returns the FilterCriteria patterns of the janitor's stream event source.
func janitorFilters(tplFunctions []stack.Function) ([]any, string, error) {
	for _, f := range tplFunctions {
		for name, ev := range f.Events() {
			if ev.Type == "DynamoDB" {
				return ev.FilterPatterns(), f.LogicalID + "/" + name, nil
			}
		}
	}
	return nil, "", errors.New("template.yaml has no function with a DynamoDB stream event source")
}

// run polls the stream until ctx ends.
func (m *streamMapping) run(ctx context.Context) error {
	iters := map[string]*string{} // shard id -> next iterator (nil: closed and drained)
	var pending []map[string]any
	var firstPending time.Time
	const maxFailures = 10 // consecutive failed calls before the poller gives up
	failures := 0
	lastDescribe := time.Time{}
	for {
		if ctx.Err() != nil {
			if len(pending) > 0 {
				m.deliver(context.WithoutCancel(ctx), pending)
			}
			return nil
		}
		if time.Since(lastDescribe) > 2*time.Second {
			if err := m.discover(ctx, iters); err != nil {
				if ctx.Err() != nil {
					continue
				}
				if failures++; failures > maxFailures {
					return err
				}
				sleepCtx(ctx, time.Duration(failures)*200*time.Millisecond)
				continue
			}
			lastDescribe = time.Now()
		}
		got := 0
		ids := make([]string, 0, len(iters))
		for id := range iters {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			it := iters[id]
			if it == nil {
				continue
			}
			out, err := m.sc.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(1000)})
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				var expired *stypes.ExpiredIteratorException
				if errors.As(err, &expired) {
					delete(iters, id) // rediscovered (from TRIM_HORIZON: the janitor is idempotent)
					lastDescribe = time.Time{}
					continue
				}
				if failures++; failures > maxFailures {
					return fmt.Errorf("stream poller: GetRecords: %w", err)
				}
				sleepCtx(ctx, time.Duration(failures)*200*time.Millisecond)
				continue // the same iterator again
			}
			failures = 0
			iters[id] = out.NextShardIterator
			now := time.Now()
			for _, r := range out.Records {
				rec := m.convert(r, now)
				m.recordsRead.Add(1)
				m.lastRecord.Store(now.UnixMilli())
				if m.observe != nil {
					m.observe(rec)
				}
				ok, err := stack.MatchAny(m.filters, rec)
				if err != nil {
					return fmt.Errorf("stream poller: filter: %w", err)
				}
				if !ok {
					m.filteredOut.Add(1)
					continue
				}
				if len(pending) == 0 {
					firstPending = now
				}
				pending = append(pending, rec)
			}
			got += len(out.Records)
		}
		for len(pending) >= m.batchSize {
			m.deliver(ctx, pending[:m.batchSize])
			pending = pending[m.batchSize:]
		}
		if len(pending) > 0 && time.Since(firstPending) >= m.window {
			m.deliver(ctx, pending)
			pending = nil
		}
		if got == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(m.poll):
			}
		}
	}
}

// discover adds the stream's shards not seen yet, each read from TRIM_HORIZON (the
// mapping's StartingPosition).
func (m *streamMapping) discover(ctx context.Context, iters map[string]*string) error {
	var start *string
	for {
		out, err := m.sc.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{
			StreamArn: aws.String(m.streamArn), ExclusiveStartShardId: start,
		})
		if err != nil {
			return fmt.Errorf("stream poller: DescribeStream: %w", err)
		}
		for _, sh := range out.StreamDescription.Shards {
			id := aws.ToString(sh.ShardId)
			if _, seen := iters[id]; seen {
				continue
			}
			it, err := m.sc.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: aws.String(m.streamArn), ShardId: sh.ShardId,
				ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				return fmt.Errorf("stream poller: GetShardIterator: %w", err)
			}
			iters[id] = it.ShardIterator
		}
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			return nil
		}
	}
}

// convert renders a stream record as Lambda delivers it, normalising DynamoDB Local's TTL
// deletions (see streamMapping).
func (m *streamMapping) convert(r stypes.Record, readAt time.Time) map[string]any {
	sr := r.Dynamodb
	if sr == nil {
		sr = &stypes.StreamRecord{}
	}
	change := map[string]any{
		"Keys":           avMap(sr.Keys),
		"SequenceNumber": aws.ToString(sr.SequenceNumber),
		"SizeBytes":      aws.ToInt64(sr.SizeBytes),
		"StreamViewType": string(sr.StreamViewType),
	}
	if sr.ApproximateCreationDateTime != nil {
		change["ApproximateCreationDateTime"] = sr.ApproximateCreationDateTime.Unix()
	}
	if sr.OldImage != nil {
		change["OldImage"] = avMap(sr.OldImage)
	}
	if sr.NewImage != nil {
		change["NewImage"] = avMap(sr.NewImage)
	}
	rec := map[string]any{
		"eventID":        aws.ToString(r.EventID),
		"eventName":      string(r.EventName),
		"eventVersion":   aws.ToString(r.EventVersion),
		"eventSource":    "aws:dynamodb",
		"awsRegion":      region,
		"dynamodb":       change,
		"eventSourceARN": m.streamArn,
	}
	if r.UserIdentity != nil {
		rec["userIdentity"] = map[string]any{
			"type": aws.ToString(r.UserIdentity.Type), "principalId": aws.ToString(r.UserIdentity.PrincipalId),
		}
	}

	ttl, hasTTL := numberAttr(sr.OldImage, m.ttlAttr)
	expired := hasTTL && ttl <= readAt.Unix()
	switch name := string(r.EventName); {
	case name == "REMOVE" && r.UserIdentity != nil:
		if aws.ToString(r.UserIdentity.PrincipalId) == ttlIdentityPrincipal {
			m.ttlEngine.Add(1)
			m.ttlEngineNative.Add(1)
		}
	case name == "REMOVE":
		if m.emulated != nil && expired && m.emulated.claim(keyString(sr.Keys), ttl) {
			rec["userIdentity"] = ttlIdentity()
			rec["turnstileDemoTTL"] = "emulated" // marked: not an engine deletion
			m.ttlEmulated.Add(1)
		}
	case name == ddbLocalTTLEventName:
		if sr.OldImage != nil && sr.NewImage == nil && expired {
			rec["eventName"] = "REMOVE"
			rec["userIdentity"] = ttlIdentity()
			m.ttlEngine.Add(1)
			if m.emulated != nil {
				m.emulated.forget(keyString(sr.Keys), ttl)
			}
		} else {
			m.unrecognised.Add(1)
		}
	case name != "INSERT" && name != "MODIFY":
		m.unrecognised.Add(1)
	}
	return rec
}

func ttlIdentity() map[string]any {
	return map[string]any{"type": ttlIdentityType, "principalId": ttlIdentityPrincipal}
}

// deliver invokes the handler with recs, retrying as the event source mapping does.
func (m *streamMapping) deliver(ctx context.Context, recs []map[string]any) {
	m.deliverAttempt(ctx, recs, 0)
}

func (m *streamMapping) deliverAttempt(ctx context.Context, recs []map[string]any, attempt int) {
	for len(recs) > 0 {
		body, err := json.Marshal(map[string]any{"Records": recs})
		if err != nil {
			m.deadLettered.Add(int64(len(recs)))
			return
		}
		m.invocations.Add(1)
		ictx, cancel := invocationContext(ctx, m.function, m.timeout)
		resp, herr := m.h.Handle(ictx, body)
		cancel()
		if herr != nil {
			m.failedInvocations.Add(1)
			if attempt >= m.maxRetries || ctx.Err() != nil {
				m.deadLettered.Add(int64(len(recs)))
				return
			}
			if len(recs) > 1 { // BisectBatchOnFunctionError
				half := len(recs) / 2
				m.deliverAttempt(ctx, recs[:half], attempt+1)
				m.deliverAttempt(ctx, recs[half:], attempt+1)
				return
			}
			attempt++
			sleepCtx(ctx, 100*time.Millisecond<<attempt)
			continue
		}
		first := -1
		for _, f := range resp.BatchItemFailures {
			for i, r := range recs {
				if seqOf(r) == f.ItemIdentifier && (first < 0 || i < first) {
					first = i
				}
			}
		}
		if first < 0 {
			m.delivered.Add(int64(len(recs)))
			return
		}
		m.delivered.Add(int64(first))
		recs = recs[first:] // checkpoint: retry from the first failed record
		m.retriedRecords.Add(int64(len(recs)))
		attempt++
		if attempt > m.maxRetries || ctx.Err() != nil {
			m.deadLettered.Add(int64(len(recs)))
			return
		}
		sleepCtx(ctx, 100*time.Millisecond<<attempt)
	}
}

func seqOf(rec map[string]any) string {
	ch, _ := rec["dynamodb"].(map[string]any)
	s, _ := ch["SequenceNumber"].(string)
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) { _ = ctxtime.Sleep(ctx, d) }

// avMap renders stream attribute values in DynamoDB JSON, as Lambda's events carry them.
func avMap(in map[string]stypes.AttributeValue) map[string]any {
	if in == nil {
		return nil
	}
	out := make(map[string]any, len(in))
	for k, v := range in {
		out[k] = avJSON(v)
	}
	return out
}

func avJSON(v stypes.AttributeValue) map[string]any {
	switch x := v.(type) {
	case *stypes.AttributeValueMemberS:
		return map[string]any{"S": x.Value}
	case *stypes.AttributeValueMemberN:
		return map[string]any{"N": x.Value}
	case *stypes.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(x.Value)}
	case *stypes.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": x.Value}
	case *stypes.AttributeValueMemberNULL:
		return map[string]any{"NULL": x.Value}
	case *stypes.AttributeValueMemberSS:
		return map[string]any{"SS": x.Value}
	case *stypes.AttributeValueMemberNS:
		return map[string]any{"NS": x.Value}
	case *stypes.AttributeValueMemberBS:
		bs := make([]string, len(x.Value))
		for i, b := range x.Value {
			bs[i] = base64.StdEncoding.EncodeToString(b)
		}
		return map[string]any{"BS": bs}
	case *stypes.AttributeValueMemberL:
		l := make([]any, len(x.Value))
		for i, e := range x.Value {
			l[i] = avJSON(e)
		}
		return map[string]any{"L": l}
	case *stypes.AttributeValueMemberM:
		return map[string]any{"M": avMap(x.Value)}
	}
	return map[string]any{"NULL": true}
}

// numberAttr returns the integer part of the number attribute name of img.
func numberAttr(img map[string]stypes.AttributeValue, name string) (int64, bool) {
	n, ok := img[name].(*stypes.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
		return i, true
	}
	f, _, err := big.ParseFloat(n.Value, 10, 64, big.ToZero)
	if err != nil {
		return 0, false
	}
	i, _ := f.Int64()
	return i, true
}

// keyString is a canonical text form of a stream record's key ("pk=...|sk=...").
func keyString(keys map[string]stypes.AttributeValue) string {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	s := ""
	for _, k := range names {
		b, _ := json.Marshal(avJSON(keys[k]))
		s += k + "=" + string(b) + "|"
	}
	return s
}

// ttlEmulator is the fallback for engines that do not expire items: it deletes lock rows
// whose TTL passed more than after ago (conditioned on the TTL value it saw, so a renewed
// lease is never deleted) and remembers them, so that the stream mapping can recognise
// their REMOVE records as TTL deletions. With DynamoDB Local it normally never acts: the
// engine's own TTL job removes expired rows first.
type ttlEmulator struct {
	mu      sync.Mutex
	claims  map[string]int64 // key -> TTL value of a row the emulator deleted
	deleted atomic.Int64
}

func newTTLEmulator() *ttlEmulator { return &ttlEmulator{claims: map[string]int64{}} }

func (e *ttlEmulator) record(key string, ttl int64) {
	e.mu.Lock()
	e.claims[key] = ttl
	e.mu.Unlock()
	e.deleted.Add(1)
}

// claim reports (once) whether the emulator deleted the row key with TTL value ttl.
func (e *ttlEmulator) claim(key string, ttl int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.claims[key]; ok && v == ttl {
		delete(e.claims, key)
		return true
	}
	return false
}

func (e *ttlEmulator) forget(key string, ttl int64) { e.claim(key, ttl) }

// unrecord withdraws a claim whose delete failed.
func (e *ttlEmulator) unrecord(key string, ttl int64) {
	if e.claim(key, ttl) {
		e.deleted.Add(-1)
	}
}

// keyStringDDB is keyString for a DynamoDB API key (string, number and binary values).
func keyStringDDB(key map[string]dtypes.AttributeValue) string {
	conv := make(map[string]stypes.AttributeValue, len(key))
	for k, v := range key {
		switch x := v.(type) {
		case *dtypes.AttributeValueMemberS:
			conv[k] = &stypes.AttributeValueMemberS{Value: x.Value}
		case *dtypes.AttributeValueMemberN:
			conv[k] = &stypes.AttributeValueMemberN{Value: x.Value}
		case *dtypes.AttributeValueMemberB:
			conv[k] = &stypes.AttributeValueMemberB{Value: x.Value}
		}
	}
	return keyString(conv)
}
