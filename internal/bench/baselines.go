package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ctxtime"
)

// The two designs of ../shared/reference, re-implemented from their descriptions for
// comparison. They are baselines only: both have flaws lockcore fixes (the FIFO one
// admits two holders), and nothing outside the bench may use them.

func randomID(owner string) string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return owner + "-" + hex.EncodeToString(b[:])
}

func isCCF(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func mustExpr(b expression.Builder) expression.Expression {
	e, err := b.Build()
	if err != nil {
		panic("bench: expression: " + err.Error())
	}
	return e
}

func sleepCtx(ctx context.Context, d time.Duration) error { return ctxtime.Sleep(ctx, d) }

// publishedLockingRead is the locking-read design: the lock is a pair of attributes on
// the item (expiry time in epoch seconds, holder id). Acquire is one UpdateItem that
// succeeds when the lock attributes are absent or expired and returns the item
// (ALL_NEW); on a failed condition the caller retries after a uniform 0–100 ms pause.
// Release is one UpdateItem that removes the attributes, conditioned on the holder id and
// an unexpired lock. The published lock lasts 30 s.
type publishedLockingRead struct {
	db    *CountingDB
	table string
	owner string
	lease time.Duration
}

// PublishedLockingReadLease is the lock duration of the published locking read.
const PublishedLockingReadLease = 30 * time.Second

// PublishedLockingReadRetry is the upper bound of the uniform retry pause.
const PublishedLockingReadRetry = 100 * time.Millisecond

func newPublishedLockingRead(env *Env, owner string, t Tuning) *publishedLockingRead {
	lease := PublishedLockingReadLease
	if t.Lease > 0 {
		lease = t.Lease
	}
	return &publishedLockingRead{db: env.Lock, table: env.DataTable, owner: owner, lease: lease}
}

func (p *publishedLockingRead) Acquire(ctx context.Context, key string) (*Held, error) {
	id := randomID(p.owner)
	itemKey := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "PLOCK#" + key},
		"sk": &types.AttributeValueMemberS{Value: "LOCK"},
	}
	secs := int64(p.lease / time.Second)
	for {
		now := time.Now().Unix()
		e := mustExpr(expression.NewBuilder().
			WithCondition(expression.Or(
				expression.AttributeNotExists(expression.Name("lockTime")),
				expression.LessThan(expression.Name("lockTime"), expression.Value(now)))).
			WithUpdate(expression.Set(expression.Name("lockTime"), expression.Value(now+secs)).
				Set(expression.Name("lockedBy"), expression.Value(id))))
		_, err := p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(p.table), Key: itemKey,
			ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			ReturnValues: types.ReturnValueAllNew,
		})
		if err == nil {
			return &Held{Release: func(ctx context.Context) error { return p.release(ctx, itemKey, id) }}, nil
		}
		if !isCCF(err) {
			return nil, err
		}
		if err := sleepCtx(ctx, time.Duration(rand.Int64N(int64(PublishedLockingReadRetry)))); err != nil {
			return nil, err
		}
	}
}

func (p *publishedLockingRead) release(ctx context.Context, itemKey map[string]types.AttributeValue, id string) error {
	now := time.Now().Unix()
	e := mustExpr(expression.NewBuilder().
		WithCondition(expression.And(
			expression.Equal(expression.Name("lockedBy"), expression.Value(id)),
			expression.GreaterThan(expression.Name("lockTime"), expression.Value(now)))).
		WithUpdate(expression.Remove(expression.Name("lockTime")).Remove(expression.Name("lockedBy"))))
	_, err := p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(p.table), Key: itemKey,
		ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValues: types.ReturnValueAllNew,
	})
	return err
}

// publishedFIFO is the ticket-queue design: a process increments one shared ticket
// counter (seeding it with a conditional put the first time), then puts its queue row
// (sort key = zero-padded ticket, expiry 60 s, heartbeat every 30 s), then polls a
// strongly consistent, paginated Query of the entity's rows until the first unexpired
// row is its own. Expired rows are skipped, not deleted. Release deletes the row.
//
// Ticket and row are two calls: a process delayed between them can enter together with
// a later ticket (two holders).
type publishedFIFO struct {
	db    *CountingDB
	table string
	owner string
	lease time.Duration
	beat  time.Duration
}

// Published FIFO parameters. The article suggests polling "perhaps every 500 ms"; the
// issue measures it at 25 ms, a tighter setting that favours it.
const (
	PublishedFIFOLease = 60 * time.Second
	PublishedFIFOBeat  = 30 * time.Second
	PublishedFIFOPoll  = 25 * time.Millisecond
	publishedFIFONS    = "bench-lock/"
)

// publishedFIFOCounter is the one shared counter row the design uses for every entity.
var publishedFIFOCounter = map[string]types.AttributeValue{
	"pk": &types.AttributeValueMemberS{Value: "fifo-ticket-counter"},
	"sk": &types.AttributeValueMemberS{Value: "current"},
}

func newPublishedFIFO(env *Env, owner string, t Tuning) *publishedFIFO {
	p := &publishedFIFO{db: env.Lock, table: env.LockTable, owner: owner, lease: PublishedFIFOLease, beat: PublishedFIFOBeat}
	if t.Lease > 0 {
		p.lease, p.beat = t.Lease, t.Lease/2
	}
	return p
}

func epochSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func fnum(f float64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatFloat(f, 'f', 3, 64)}
}

func (p *publishedFIFO) ticket(ctx context.Context) (int64, error) {
	for {
		e := mustExpr(expression.NewBuilder().
			WithCondition(expression.AttributeExists(expression.Name("pk"))).
			WithUpdate(expression.Set(expression.Name("ticketNumber"),
				expression.Plus(expression.Name("ticketNumber"), expression.Value(1)))))
		out, err := p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(p.table), Key: publishedFIFOCounter,
			ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			ReturnValues: types.ReturnValueUpdatedNew,
		})
		if err == nil {
			return counterN(out.Attributes, "ticketNumber")
		}
		if !isCCF(err) {
			return 0, err
		}
		// No counter yet: seed it with 1. Losing that race means someone else seeded it,
		// so increment again.
		seed := map[string]types.AttributeValue{"ticketNumber": num(1)}
		for k, v := range publishedFIFOCounter {
			seed[k] = v
		}
		se := mustExpr(expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))))
		_, err = p.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(p.table), Item: seed,
			ConditionExpression: se.Condition(), ExpressionAttributeNames: se.Names(), ExpressionAttributeValues: se.Values(),
		})
		if err == nil {
			return 1, nil
		}
		if !isCCF(err) {
			return 0, err
		}
	}
}

func counterN(it map[string]types.AttributeValue, attr string) (int64, error) {
	v, ok := it[attr].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("counter returned no %s", attr)
	}
	return strconv.ParseInt(v.Value, 10, 64)
}

func (p *publishedFIFO) Acquire(ctx context.Context, key string) (*Held, error) {
	t, err := p.ticket(ctx)
	if err != nil {
		return nil, err
	}
	sk := fmt.Sprintf("%s%038d", publishedFIFONS, t)
	rowKey := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: key},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
	now := epochSeconds(time.Now())
	row := map[string]types.AttributeValue{"createdAt": fnum(now), "expiresAt": fnum(now + p.lease.Seconds())}
	for k, v := range rowKey {
		row[k] = v
	}
	re := mustExpr(expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))))
	if _, err := p.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(p.table), Item: row,
		ConditionExpression: re.Condition(), ExpressionAttributeNames: re.Names(), ExpressionAttributeValues: re.Values(),
	}); err != nil {
		return nil, err
	}

	// Heartbeat from the moment the row exists until release (or until ctx ends: a crash).
	hbCtx, stop := context.WithCancel(ctx)
	var hbDone sync.WaitGroup
	hbDone.Add(1)
	go func() {
		defer hbDone.Done()
		tick := time.NewTicker(p.beat)
		defer tick.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-tick.C:
			}
			he := mustExpr(expression.NewBuilder().
				WithCondition(expression.AttributeExists(expression.Name("pk"))).
				WithUpdate(expression.Set(expression.Name("expiresAt"),
					expression.Value(epochSeconds(time.Now())+p.lease.Seconds()))))
			_, _ = p.db.UpdateItem(hbCtx, &dynamodb.UpdateItemInput{
				TableName: aws.String(p.table), Key: rowKey,
				ConditionExpression: he.Condition(), UpdateExpression: he.Update(),
				ExpressionAttributeNames: he.Names(), ExpressionAttributeValues: he.Values(),
			})
		}
	}()
	release := func(ctx context.Context) error {
		stop()
		hbDone.Wait()
		_, err := p.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(p.table), Key: rowKey})
		return err
	}

	for {
		first, err := p.first(ctx, key, sk)
		if err != nil {
			stop()
			hbDone.Wait()
			return nil, err
		}
		if first {
			return &Held{Release: release}, nil
		}
		if err := sleepCtx(ctx, PublishedFIFOPoll); err != nil {
			stop()
			hbDone.Wait()
			return nil, err // as published, the row stays until it expires
		}
	}
}

// first reports whether sk is the first unexpired row of key's queue.
func (p *publishedFIFO) first(ctx context.Context, key, sk string) (bool, error) {
	kc := expression.Key("pk").Equal(expression.Value(key)).
		And(expression.Key("sk").BeginsWith(publishedFIFONS))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return false, err
	}
	var start map[string]types.AttributeValue
	for {
		out, err := p.db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(p.table), KeyConditionExpression: e.KeyCondition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
			ConsistentRead: aws.Bool(true), Limit: aws.Int32(100), ScanIndexForward: aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return false, err
		}
		now := epochSeconds(time.Now())
		for _, it := range out.Items {
			exp, _ := strconv.ParseFloat(attrString(it, "expiresAt"), 64)
			switch {
			case exp < now:
				continue // expired: skipped (deletion is left to TTL)
			case attrString(it, "sk") == sk:
				return true, nil
			default:
				return false, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return false, nil
		}
		start = out.LastEvaluatedKey
	}
}

func attrString(it map[string]types.AttributeValue, name string) string {
	switch v := it[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}
