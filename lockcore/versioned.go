package lockcore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrSkip, returned by a merge function, ends Versioned.Update without writing.
var ErrSkip = errors.New("lockcore: skip write")

// Versioned is optimistic concurrency control: no lock at all, every write conditioned
// on the version it read. Under low contention it is the cheapest strategy (one read and
// one write); under high contention writers burn retries, so prefer a lock for hot items.
type Versioned struct {
	db          DynamoDB
	table       string
	cfg         *config
	versionAttr string
	writerAttr  string
	maxAttempts int
}

const versionWriterAttr = "versionWriter"

// WithVersionAttribute names a Versioned store's version attribute (default "version").
// Other strategies refuse it.
func WithVersionAttribute(n string) Option { return VersionAttribute(n) }

// VersionAttribute is WithVersionAttribute.
//
// Deprecated: client options are named With...; use WithVersionAttribute.
func VersionAttribute(n string) Option {
	return func(c *config) error {
		c.only("versionAttribute", StrategyVersioned)
		if err := validateAttrName("versionAttribute", n); err != nil {
			return err
		}
		if n == versionWriterAttr {
			return invalidOption("versionAttribute", "%q is reserved", n)
		}
		c.versioned.attr = n
		return nil
	}
}

// WithMaxAttempts bounds the read-merge-write attempts of one Versioned.Update (default
// 10). Other strategies refuse it.
func WithMaxAttempts(k int) Option { return MaxAttempts(k) }

// MaxAttempts is WithMaxAttempts.
//
// Deprecated: client options are named With...; use WithMaxAttempts.
func MaxAttempts(k int) Option {
	return func(c *config) error {
		c.only("maxAttempts", StrategyVersioned)
		if k < 1 {
			return invalidOption("maxAttempts", "must be at least 1, got %d", k)
		}
		c.versioned.maxAttempts = k
		return nil
	}
}

// NewVersioned returns a Versioned store on table, a table of the caller's. Besides the
// common options it takes VersionAttribute and MaxAttempts.
func NewVersioned(db DynamoDB, table string, opts ...Option) (*Versioned, error) {
	cfg, err := clientConfig(db, table, StrategyVersioned, opts)
	if err != nil {
		return nil, err
	}
	v := &Versioned{db: guarded(db), table: table, cfg: cfg, versionAttr: "version", writerAttr: versionWriterAttr, maxAttempts: 10}
	if cfg.versioned.attr != "" {
		v.versionAttr = cfg.versioned.attr
	}
	if cfg.versioned.maxAttempts > 0 {
		v.maxAttempts = cfg.versioned.maxAttempts
	}
	return v, nil
}

// MergeFunc computes the new item from the current one (nil if absent). It may be
// called several times, each time with fresher data; it must not have side effects.
// Return ErrSkip to write nothing. The key and version attributes are set by Update.
type MergeFunc func(current map[string]types.AttributeValue) (map[string]types.AttributeValue, error)

// Update reads the item (strongly consistent), merges, and writes it conditioned on the
// version read, retrying with backoff on conflict. It returns the written item and its
// version. After MaxAttempts conflicts it returns ErrConflict. An item whose version
// attribute holds anything but an integer below 2^63−1 (a string, a fraction) is
// refused with an error naming it, without a write.
//
// A write that fails ambiguously (timeout, reset, 5xx) is never blindly repeated: every
// write carries a writer id, and later reads settle whether it landed. At most one of
// the attempts lands, since they are all conditioned on the same version until a read
// proves the earlier ones cannot land any more. When the item moved on too far to tell —
// or is absent after such a write (it may have landed and been deleted since) — Update
// returns ErrUnknownOutcome; likewise when MaxAttempts attempts ended with ambiguous
// writes (each after a backoff pause), or with one that a last read could not settle.
// Update never writes more than MaxAttempts times.
func (v *Versioned) Update(ctx context.Context, key map[string]types.AttributeValue, merge MergeFunc) (map[string]types.AttributeValue, int64, error) {
	if len(key) == 0 {
		return nil, 0, invalidKey("key", "must not be empty")
	}
	if merge == nil {
		return nil, 0, invalidOption("merge", "must not be nil")
	}
	bo := backoff{base: v.cfg.backoffBase, cap: v.cfg.backoffCap}
	// Writers of ambiguous attempts, all conditioned on version pendingVer (-1: none),
	// or on the item having none (pendingNone).
	var pending []string
	pendingVer := int64(-1)
	pendingNone := false
	attempt := 0
	var lastErr error // the last attempt's write error
	for {
		out, err := v.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(v.table), Key: key, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			if classify(err) != errFatal && ctx.Err() == nil {
				if serr := sleep(ctx, bo.next()); serr == nil {
					continue
				}
			}
			if len(pending) > 0 {
				return nil, 0, fmt.Errorf("%w: versioned read after an ambiguous write: %v", ErrUnknownOutcome, err)
			}
			return nil, 0, fmt.Errorf("lockcore: versioned read: %w", err)
		}
		cur := out.Item
		ver, hasVer := attrN(cur, v.versionAttr)
		if len(pending) > 0 {
			switch w := attrS(cur, v.writerAttr); {
			case slices.Contains(pending, w):
				return v.strip(cur), ver, nil // an ambiguous attempt of ours landed
			case !hasVer:
				// No item (or no version): ours may have landed and the item been deleted
				// since — absent looks the same as never written, and writing again
				// could apply the update twice.
				return nil, 0, fmt.Errorf("%w: the item has no version after an ambiguous write (deleted, or never written)", ErrUnknownOutcome)
			case ver == pendingVer && !pendingNone:
				// Not landed yet; the next attempt has the same condition, so at most
				// one of them can.
			case ver == pendingVer+1:
				pending, pendingVer = nil, -1 // someone else wrote that version: ours cannot land
			default:
				return nil, 0, fmt.Errorf("%w: version moved from %d to %d after an ambiguous write", ErrUnknownOutcome, pendingVer, ver)
			}
		}
		if av, ok := cur[v.versionAttr]; ok && (!hasVer || ver == math.MaxInt64) {
			// A version Update cannot advance: conditioning on its absence would fail
			// every attempt (reported as lost to writers that do not exist), and the
			// largest int64 would wrap to a negative version.
			return nil, 0, fmt.Errorf("lockcore: versioned update: the item's %q is %s, not a version Update can advance (an integer below 2^63-1)", v.versionAttr, describeAV(av))
		}
		if attempt >= v.maxAttempts {
			// The attempts are spent: this read only settled the ambiguous ones (a
			// conflict or a throttled write after them is no answer).
			if len(pending) > 0 {
				return nil, 0, fmt.Errorf("%w: %d attempts, an ambiguous one not settled: %v", ErrUnknownOutcome, attempt, lastErr)
			}
			return nil, 0, fmt.Errorf("%w: %d attempts: %v", ErrConflict, attempt, lastErr)
		}
		attempt++
		next, err := merge(cur)
		if errors.Is(err, ErrSkip) {
			return v.strip(cur), ver, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if next == nil {
			return nil, 0, invalidOption("merge", "returned a nil item without ErrSkip")
		}
		writer := randomHex(16)
		put := make(item, len(next)+len(key)+2)
		for k, val := range next {
			put[k] = val
		}
		for k, val := range key {
			put[k] = val
		}
		put[v.versionAttr] = n(ver + 1)
		put[v.writerAttr] = s(writer)
		cond := expression.Equal(name(v.versionAttr), value(ver))
		if !hasVer {
			cond = expression.AttributeNotExists(name(v.versionAttr))
		}
		e := expr(expression.NewBuilder().WithCondition(cond))
		_, err = v.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(v.table), Item: put,
			ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		}, noSDKRetry)
		if err == nil {
			return v.strip(put), ver + 1, nil
		}
		lastErr = err
		switch classify(err) {
		case errFatal:
			if len(pending) > 0 {
				return nil, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
			}
			return nil, 0, fmt.Errorf("lockcore: versioned write: %w", err)
		case errAmbiguous:
			pending, pendingVer, pendingNone = append(pending, writer), ver, !hasVer
			if attempt >= v.maxAttempts {
				return nil, 0, fmt.Errorf("%w: %d attempts, the last ones ambiguous: %v", ErrUnknownOutcome, attempt, err)
			}
			// The next read settles it, after a pause (a table that times out is not
			// helped by being asked again at once).
			if serr := sleep(ctx, bo.next()); serr != nil {
				return nil, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, serr)
			}
			continue
		}
		if attempt >= v.maxAttempts && len(pending) == 0 {
			return nil, 0, fmt.Errorf("%w: %d attempts: %v", ErrConflict, attempt, err)
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			if len(pending) > 0 {
				return nil, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, serr)
			}
			return nil, 0, fmt.Errorf("lockcore: versioned update: %w", serr)
		}
	}
}

func (v *Versioned) strip(it item) item {
	out := make(item, len(it))
	for k, val := range it {
		if k != v.writerAttr {
			out[k] = val
		}
	}
	return out
}

// describeAV names an attribute value for an error: a number's digits, otherwise its type.
func describeAV(av types.AttributeValue) string {
	if n, ok := av.(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return "of type " + strings.TrimPrefix(fmt.Sprintf("%T", av), "*types.AttributeValueMember")
}
