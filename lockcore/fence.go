package lockcore

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Fencing tokens of the lease mutex are epoch<<32 | n, where n counts the acquisitions
// during one life of the lock row and epoch numbers the row's lives. A lock row can be
// deleted (by TTL after a crashed holder, or by the janitor's sweep) and created again;
// its counter then restarts, so the new life takes a fresh epoch from a keeper row that
// never expires. Keepers are shared by hash buckets of keys: any counter that only grows
// works, and sharing bounds the table to a fixed number of keeper rows.
//
// A new epoch costs two extra calls, paid only by the first acquisition of each row life.
//
// Limit: tokens stay ordered while one row life sees fewer than 2^32 acquisitions
// (a key acquired 100 times a second for 1.3 years without its row ever being deleted).
const (
	fenceBuckets  = 1024
	keeperSK      = "epoch"
	attrNextEpoch = "next"
)

func makeFence(epoch, n int64) Fence { return Fence(epoch<<32 | (n & 0xffffffff)) }

// Epoch returns the row-life part of a Mutex's or TicketLock's token. (An ItemLocker's
// token does not split this way: see ItemLease.Token.)
func (f Fence) Epoch() int64 { return int64(f) >> 32 }

// Seq returns the acquisition number within the row life of a Mutex's or TicketLock's
// token.
func (f Fence) Seq() int64 { return int64(f) & 0xffffffff }

// String formats the token for people, as every lockcore tool shows it: the number
// (what FenceCondition compares and `turnstile locks release --token` takes) and, for a
// token with a row-life epoch (Mutex, TicketLock), its parts, "4294967297 (epoch 1,
// seq 1)": the raw number alone hides that this is the first acquisition of the row's
// first life. A token without such an epoch is the plain number: a Queue's ticket, and an
// ItemLocker's token, whose epoch is a time (epoch<<10 + ticket, see below; Inspector's
// FenceInfo decodes it) and so lies far above any count of a row's lives.
func (f Fence) String() string {
	if e := f.Epoch(); e == 0 || e > maxRowLives {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprintf("%d (epoch %d, seq %d)", int64(f), f.Epoch(), f.Seq())
}

// maxRowLives bounds the epochs Fence.String reads as counts of a lock row's lives (each
// a TTL deletion and re-creation of the row): a larger "epoch" is an ItemLocker's time.
const maxRowLives = 1 << 20

// Fencing tokens of the locking read (ItemLocker) follow the same scheme with another
// epoch: epoch<<10 + n, where n is the acquisition's ticket, counted per life of the data
// item (its Fence attribute), and epoch the start of that life in µs since 1970 (its
// Epoch attribute, written by the take that begins the life with if_not_exists and never
// changed while the item exists). Deleting the item deletes both; the next take begins a
// new life with a later epoch. No keeper row can number the item's lives as the Mutex's
// do: the item lives in the caller's table, under the caller's key schema, and nothing
// of it survives its deletion. The epoch is therefore a time: the wall clock of the
// client whose take began the life (the µs resolution keeps lives begun one after the
// other by one process apart).
//
// Limits: a later life's tokens exceed an earlier life's as long as the take that began
// it was sent later, by its client's wall clock, than the take that began the earlier
// one by its client's: that is, as long as the clocks of the clients that lock the item
// disagree by less than the time between the beginnings of two consecutive lives (at
// least the earlier life's span, from its first acquisition to its deletion), and no
// take that begins a life was on its way for that long, and as long as the earlier life
// saw fewer acquisitions than 1024 per µs between the two beginnings (its last token,
// epoch<<10 + n, must stay below the next life's first; DynamoDB allows about one write
// per ms on an item, so n stays far below that). Within a life tokens strictly increase
// whatever the clocks say: the epoch is fixed and n counts up. A life begun by a client of the
// previous release has no epoch: its tokens are its tickets until a new client's take or
// heartbeat gives it one (so they only grow). Tokens fit an int64 until the year 2255.
const itemEpochShift = 10

// itemFence is the token of ticket n in an item life that began at epoch (0: none).
func itemFence(epoch, n int64) Fence {
	if epoch <= 0 {
		return Fence(n)
	}
	return Fence(epoch<<itemEpochShift + n)
}

// itemEpoch is the epoch of an item life begun now.
func itemEpoch(now time.Time) int64 { return max(now.UnixMicro(), 1) }

func keeperKey(key string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return fmt.Sprintf("%sfence#%04d", reservedPrefix, h.Sum32()%fenceBuckets)
}

// takeEpoch takes the next epoch from key's keeper row. ADD is atomic and a retried ADD
// only skips a number, which is fine: so a throttled or ambiguous call is simply retried
// until it succeeds or ctx ends.
func takeEpoch(ctx context.Context, db DynamoDB, table string, names TableAttributes, key string, bo backoff) (int64, error) {
	ke := expr(expression.NewBuilder().WithUpdate(expression.Add(name(attrNextEpoch), value(1))))
	for {
		out, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       names.key(keeperKey(key), keeperSK),
			UpdateExpression:          ke.Update(),
			ExpressionAttributeNames:  ke.Names(),
			ExpressionAttributeValues: ke.Values(),
			ReturnValues:              types.ReturnValueUpdatedNew,
		}, noSDKRetry)
		if err == nil {
			epoch, ok := attrN(out.Attributes, attrNextEpoch)
			if !ok {
				return 0, fmt.Errorf("lockcore: acquire %q: keeper returned no epoch", key)
			}
			return epoch, nil
		}
		if classify(err) == errFatal {
			return 0, fmt.Errorf("lockcore: acquire %q: new fence epoch: %w", key, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return 0, fmt.Errorf("lockcore: acquire %q: new fence epoch: %w (last error: %v)", key, serr, err)
		}
	}
}

// FenceCondition returns a condition for a write to data protected by a lock: it passes
// only if the item's fence attribute is absent or not greater than token. Combine it
// with FenceUpdate in the same write so the item remembers the highest token it has
// seen; a holder that lost its lease and wakes up later then cannot overwrite the work
// of a newer holder.
//
// Fencing the write alone does not protect a read-modify-write: a paused holder (token
// 5) and the next holder (token 6) may both read n and, if 6 has not written yet, 5's
// write of n+1 passes and 6's write of n+1 follows. Register the token at the read too
// (write it to the item when reading, conditioned the same way), or use the locking read
// (ItemLocker), whose write is conditioned on the lease itself.
//
//	cond := lockcore.FenceCondition("fence", lease.Token())
//	upd  := lockcore.FenceUpdate(expression.Set(...), "fence", lease.Token())
func FenceCondition(attr string, token Fence) expression.ConditionBuilder {
	return expression.Or(
		expression.AttributeNotExists(name(attr)),
		expression.LessThanEqual(name(attr), value(int64(token))),
	)
}

// FenceUpdate adds "SET attr = token" to update.
func FenceUpdate(update expression.UpdateBuilder, attr string, token Fence) expression.UpdateBuilder {
	return update.Set(name(attr), value(int64(token)))
}
