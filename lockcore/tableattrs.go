package lockcore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TableAttributes names the lock table's key and TTL attributes. The zero value of a
// field means its default: partition key "pk", sort key "sk", TTL attribute "expiresAt"
// (DefaultTableAttributes). Every client of one lock table (Mutex, TicketLock, Queue,
// Inspector, CreateLockTable) must use the same names: give them WithTableAttributes,
// InspectTableAttributes and WithAttributes.
type TableAttributes struct {
	PartitionKey string // string partition key: the lock key
	SortKey      string // string sort key: the namespace and the strategy's row suffix
	TTL          string // Number attribute, epoch seconds, that the table's TTL is set on
}

// DefaultTableAttributes are the names a lock table uses unless told otherwise.
var DefaultTableAttributes = TableAttributes{PartitionKey: attrPK, SortKey: attrSK, TTL: attrExpiresAt}

// reservedAttrs are the attribute names lockcore writes on lock rows itself: a key or TTL
// attribute may not take one of them (nor start with a reserved prefix).
var reservedAttrs = []string{
	attrState, attrOwner, attrLeaseID, attrRev, attrFence, attrEpoch, attrLeaseMs, attrUntil,
	attrAcquiredAt, attrData, attrPrevLease, attrPrevState, attrServing, attrNext, attrLife,
	attrHFor, attrHUntil, attrHSince, attrHOwner, attrHoldMs, attrRel, attrSkip,
	attrForcedBy, attrForcedAt, attrForcedReason, attrForcedLease, attrForcedOwner,
	attrForcedToken, attrForcedID, attrAuditStrategy, attrAuditNS,
	"ticket", "hb", "resv",
}

// withDefaults fills empty names with the defaults.
func (a TableAttributes) withDefaults() TableAttributes {
	if a.PartitionKey == "" {
		a.PartitionKey = attrPK
	}
	if a.SortKey == "" {
		a.SortKey = attrSK
	}
	if a.TTL == "" {
		a.TTL = attrExpiresAt
	}
	return a
}

// validate checks the names (after defaults), naming the offending field.
func (a TableAttributes) validate(option string) error {
	fields := []struct{ field, v string }{
		{"PartitionKey", a.PartitionKey}, {"SortKey", a.SortKey}, {"TTL", a.TTL},
	}
	seen := map[string]string{}
	for _, f := range fields {
		field := option + "." + f.field
		switch {
		case len(f.v) > 255:
			return invalidOption(field, "is %d bytes; DynamoDB attribute names hold at most 255", len(f.v))
		case !utf8.ValidString(f.v):
			return invalidOption(field, "must be valid UTF-8")
		case strings.HasPrefix(f.v, waiterPrefix) || strings.HasPrefix(f.v, detailPrefix):
			return invalidOption(field, "%q starts with %q, which names lockcore's own entries on a lock row", f.v, f.v[:2])
		}
		for _, r := range reservedAttrs {
			if f.v == r {
				return invalidOption(field, "%q is an attribute lockcore writes on lock rows itself", f.v)
			}
		}
		if other, dup := seen[f.v]; dup {
			return invalidOption(field, "%q is already the %s", f.v, other)
		}
		seen[f.v] = f.field
	}
	return nil
}

// WithTableAttributes sets the lock table's key and TTL attribute names (Mutex,
// TicketLock and Queue; an ItemLocker locks items of your own table and refuses it).
// Empty fields keep their defaults; a name lockcore uses on lock rows itself is refused.
func WithTableAttributes(a TableAttributes) Option {
	return func(c *config) error {
		a = a.withDefaults()
		if err := a.validate("WithTableAttributes"); err != nil {
			return err
		}
		c.names, c.namesSet = a, true
		return nil
	}
}

// InspectTableAttributes sets the key and TTL attribute names of the lock table the
// Inspector reads (see WithTableAttributes).
func InspectTableAttributes(a TableAttributes) InspectorOption {
	return func(in *Inspector) error {
		a = a.withDefaults()
		if err := a.validate("InspectTableAttributes"); err != nil {
			return err
		}
		in.names = a
		return nil
	}
}

// WithAttributes makes CreateLockTable create the table with these key and TTL
// attribute names (see WithTableAttributes).
func WithAttributes(a TableAttributes) TableOption {
	return func(c *tableConfig) error {
		a = a.withDefaults()
		if err := a.validate("WithAttributes"); err != nil {
			return err
		}
		c.names = a
		return nil
	}
}

// key is the lock-table key of partition pk and sort key sk.
func (a TableAttributes) key(pk, sk string) item {
	return item{a.PartitionKey: s(pk), a.SortKey: s(sk)}
}

// String names the attributes for error messages.
func (a TableAttributes) String() string {
	return fmt.Sprintf("partition key %q, sort key %q, TTL attribute %q", a.PartitionKey, a.SortKey, a.TTL)
}
