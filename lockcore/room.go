package lockcore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Item size. DynamoDB refuses a write that would make an item larger than 400 KB
// (409,600 bytes: attribute names plus values), with a ValidationException. A lock
// whose holder cannot write its lock's item cannot renew: its lease runs out although
// nobody took it. Both locks that keep a queue on one item keep room for that:
//
//   - Mutex: waiters' data (up to 64 KiB each) can fill a lock row. The holder's writes
//     add a few attributes (a heartbeat records hOwner, which a handoff removed; releases
//     and skips record rel, skip, holdMs and the next ticket's hFor/hUntil/hSince; a new
//     life its epoch), so a queued take that leaves less than itemHeadroom withdraws its
//     ticket and waits for room (fairmutex.go).
//   - ItemLocker: the caller's data fills the item. A waiter handed the item writes its
//     lease id, owner name and lock time into it (up to ~600 bytes with the default
//     attribute names); every heartbeat may add a few bytes (numbers grow by a digit).
//     A queued take that leaves less than itemHeadroom withdraws its ticket and fails
//     with an ItemTooLargeError; a holder's write to an item near the limit carries
//     padding (the Room attribute, itemHeadroom bytes less the holder's own attributes)
//     that the next holder's first write gives back, so that a holder write which would
//     leave less fails instead of landing; and a waiter handed an item that another
//     writer filled holds it without writing its lease id (itemlock.go).
//
// Both use the one limit and headroom below, and itemBytes to count.
const (
	maxItemBytes = 400 << 10
	itemHeadroom = 2 << 10
)

// itemLimit is the item size limit a Mutex reasons with: DynamoDB's, or the one a test
// set (WithRowBudget). An ItemLocker uses maxItemBytes: its padding is checked by the
// engine, against the engine's own limit.
func (c *config) itemLimit() int {
	if n := c.hooks.rowBytes; n > 0 {
		return n
	}
	return maxItemBytes
}

// itemBytes is an item's size as DynamoDB counts it: names plus values, a number one
// byte per two significant digits plus one (two if negative), a map or list 3 bytes
// plus one per element.
func itemBytes(it item) int {
	n := 0
	for k, v := range it {
		n += len(k) + valueBytes(v)
	}
	return n
}

func valueBytes(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberBytes(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueBytes(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueBytes(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += numberBytes(e)
		}
		return n
	}
	return 1
}

// numberBytes is DynamoDB's size of a number: leading and trailing zeros do not count.
func numberBytes(s string) int {
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Trim(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, mant), "0")
	n := (len(digits)+1)/2 + 1
	if neg {
		n++
	}
	return n
}

// tooLarge reports whether err is DynamoDB's refusal of a write that would make the item
// larger than its limit.
func tooLarge(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException" &&
		strings.Contains(api.ErrorMessage(), "exceeded the maximum allowed size")
}

// renewRoom bounds what a heartbeat adds to an item: it rewrites numbers (times, the
// revision) that may gain a few significant digits, and a new epoch once.
const renewRoom = 64

// ItemTooLargeError is returned when the item a lock lives on has no room for what a
// lock operation must write: DynamoDB refused the write as larger than its item size
// limit, or the write would have left less than the room the lock keeps free for its
// holders' writes. Nothing was written; a lease the operation was made under is still
// held. It matches ErrItemTooLarge, and the engine's error when there was one.
type ItemTooLargeError struct {
	Op    string // "acquire", "update", "update-and-release", "renew", "release"
	Key   string // the lock key (an item's key as "pk=…,sk=…")
	Size  int    // the item's size in bytes as last seen (0: unknown)
	Keep  int    // bytes the lock keeps free for its holders' writes (0: none asked)
	Limit int    // the item size limit (DynamoDB's: 409,600 bytes)
	Cause error  // the engine's ValidationException, if it refused the write
}

func (e *ItemTooLargeError) Error() string {
	msg := fmt.Sprintf("lockcore: %s %s: item too large for the lock: ", e.Op, e.Key)
	if e.Keep > 0 {
		msg += fmt.Sprintf("the write would leave less than %d bytes of DynamoDB's %d-byte item limit free "+
			"(the lock keeps up to %d free for its holders' lock attributes)", e.Keep, e.Limit, itemHeadroom)
	} else {
		msg += fmt.Sprintf("the write would make it larger than DynamoDB's %d-byte item limit", e.Limit)
	}
	if e.Size > 0 {
		msg += fmt.Sprintf("; the item was %d bytes when last seen", e.Size)
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrItemTooLarge and the engine's error.
func (e *ItemTooLargeError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrItemTooLarge, e.Cause}
	}
	return []error{ErrItemTooLarge}
}
