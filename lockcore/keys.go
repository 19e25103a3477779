package lockcore

import (
	"strings"
	"unicode/utf8"
)

// DynamoDB key limits: a partition key value is 1..2048 bytes, a sort key value 1..1024.
const (
	MaxPartitionKeyBytes = 2048
	MaxSortKeyBytes      = 1024
)

// reservedPrefix marks rows lockcore writes for its own bookkeeping (fence epochs, queue
// counters); user keys must not start with it.
const reservedPrefix = "turnstile#"

func validatePK(field, v string) error {
	switch {
	case v == "":
		return invalidKey(field, "must not be empty")
	case len(v) > MaxPartitionKeyBytes:
		return invalidKey(field, "is %d bytes; DynamoDB partition keys hold at most %d", len(v), MaxPartitionKeyBytes)
	case !utf8.ValidString(v):
		return invalidKey(field, "must be valid UTF-8")
	case strings.HasPrefix(v, reservedPrefix):
		return invalidKey(field, "must not start with the reserved prefix %q", reservedPrefix)
	}
	return nil
}

// nsSeparator joins a namespace and a strategy's row suffix in the lock table's sort
// key (Mutex: "<ns>", TicketLock: "<ns>#ticket", Queue: "<ns>#counter", "<ns>#resv",
// "<ns>#t#<n>").
// Namespaces must not contain it, so that no namespace of one strategy can name a row of
// another strategy or of another namespace.
const nsSeparator = "#"

func validateSK(field, v string, room int) error {
	switch {
	case v == "":
		return invalidKey(field, "must not be empty")
	case strings.Contains(v, nsSeparator):
		return invalidKey(field, "%q must not contain %q (it separates a namespace from a strategy's row suffix)", v, nsSeparator)
	case len(v)+room > MaxSortKeyBytes:
		return invalidKey(field, "is %d bytes; at most %d fit in a DynamoDB sort key here", len(v), MaxSortKeyBytes-room)
	case !utf8.ValidString(v):
		return invalidKey(field, "must be valid UTF-8")
	}
	return nil
}

// validateAttrName checks a configurable attribute name. Names are top-level attributes:
// '.', '[' and ']' would make the expression builder read them as document paths.
func validateAttrName(field, v string) error {
	switch {
	case v == "":
		return invalidOption(field, "must not be empty")
	case !utf8.ValidString(v):
		return invalidOption(field, "must be valid UTF-8")
	case strings.ContainsAny(v, ".[]"):
		return invalidOption(field, "%q: must not contain '.', '[' or ']' (it names a top-level attribute)", v)
	}
	return nil
}
