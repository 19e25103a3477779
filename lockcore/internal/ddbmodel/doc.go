// Package ddbmodel is an in-memory model of DynamoDB's item semantics: enough of
// DynamoDB for lockcore's own code to run against it, so that a seeded, deterministic
// simulator can run many lockcore clients against one model. The model may stand in for
// the engine only because conformance_test.go runs the same random operation sequences
// against the model and against DynamoDB Local and requires the same answers; a
// behaviour the conformance test does not exercise is a behaviour the model may get
// wrong.
//
// A DB holds tables (string keys only: a hash key and an optional range key; LockSchema
// is lockcore's pk/sk) and implements lockcore.DynamoDB (GetItem, PutItem, UpdateItem,
// DeleteItem, Query, TransactWriteItems) and Scan, taking and returning the SDK's own
// input, output and error types. It has no goroutines and no clock: given the same calls
// in the same order it gives the same answers.
//
// # Modelled
//
//   - Values: S, N, B, BOOL, NULL, L, M, SS, NS, BS. Numbers are exact decimals of up to
//     38 significant digits, magnitudes 1e-130 to below 1e126 (beyond: DynamoDB's
//     ValidationException), compared by value and stored and returned in canonical
//     text ("1.50" is "1.5", "1e2" is "100"). Sets must be non-empty and free of
//     duplicates; key attributes must be non-empty strings (at most 2048 and 1024
//     bytes).
//   - Expressions (tokenizer and recursive-descent parser; keywords in any case, bare
//     names, #name and :value placeholders, document paths with map keys and list
//     indexes): conditions with = <> < <= > >=, BETWEEN, IN, AND, OR, NOT,
//     parentheses, attribute_exists, attribute_not_exists, attribute_type,
//     begins_with, contains, size; updates with SET (values, paths, if_not_exists,
//     list_append, + and -), REMOVE, ADD (numbers, sets), DELETE (sets); key
//     conditions (hash key = v, and on the range key = < <= > >= BETWEEN begins_with);
//     projections. Placeholders that no expression uses are refused, as are two
//     update (or projection) paths that overlap.
//   - Evaluation as DynamoDB Local does it: a comparison with a missing attribute is
//     false, except <>, which is true; values of different types are never ordered;
//     size of a string counts UTF-16 code units (Local is Java), size of a number is
//     no value; an operand of an ordering comparison, BETWEEN or
//     begins_with given as a literal of the wrong type, BETWEEN bounds of different
//     types or in the wrong order, and an operator whose first operand reappears
//     (a > a) are refused before the item is read. Every right-hand side of an update
//     reads the item as it was before the update; a path operand that is missing, an
//     operand of the wrong type, a path whose parent is missing, and arithmetic that
//     needs more than 38 digits are ValidationExceptions raised after the condition
//     held. UpdateItem creates a missing item (even for REMOVE only).
//   - ReturnValues NONE, ALL_OLD (PutItem, UpdateItem, DeleteItem), ALL_NEW,
//     UPDATED_OLD and UPDATED_NEW (UpdateItem: the whole top-level attribute of each
//     written path that exists before, or after, the update);
//     ReturnValuesOnConditionCheckFailure=ALL_OLD (the item in the
//     ConditionalCheckFailedException and in a cancellation reason).
//   - The 400 KB item size limit with DynamoDB's size rules (UTF-8 bytes of names and
//     strings, raw bytes of binaries, 1 for BOOL and NULL, a number 1 byte plus 1 per
//     two digits paired from the decimal point plus 1 if negative, 3 bytes plus 1 per
//     element for L and M): an item of 409,600 bytes is allowed, one more is not. A
//     PutItem is refused ("Item size has exceeded the maximum allowed size") before
//     its condition is evaluated. An UpdateItem is refused ("Item size to update has
//     exceeded the maximum allowed size") before its condition when the names and
//     literal values of its SET and ADD actions alone exceed the limit
//     (updateExpr.declaredSize), and after it when the updated item does.
//   - TransactWriteItems: ConditionCheck, Put, Update, Delete on up to 100 distinct
//     items in any tables of the DB, all or nothing; TransactionCanceledException with
//     one reason per action ("None", "ConditionalCheckFailed" with the item on
//     ALL_OLD, "ValidationError" for an update leaving an item too large, or a single
//     "ValidationError" reason when an update writes a key attribute), in DynamoDB
//     Local's order of checks (see DB.TransactWriteItems). ClientRequestToken
//     idempotency is not modelled.
//   - Query: a partition in range key order (UTF-8 byte order), ScanIndexForward,
//     Limit, ExclusiveStartKey and LastEvaluatedKey, the 1 MB page, FilterExpression
//     (after Limit), ProjectionExpression, Count and ScannedCount. Scan: the same over
//     the table, ordered by hash key then range key (the service orders by a hash of
//     the partition key: callers must not depend on the order; the conformance test
//     does not compare Scan pages).
//   - Consistency: strongly consistent reads and every write see the latest state. The
//     DB keeps each item's versions for the last WithHistory writes (default 1024); an
//     eventually consistent read (GetItem, Query, Scan) sees the tables as they were
//     after the write its Staleness policy picks (default Latest: DynamoDB Local is
//     always consistent; RandomLag is a seeded policy).
//   - TTL: Table.ExpireTTL(now, attr) deletes, as one write, every item whose attr is a
//     number of epoch seconds before now and not more than five years before now,
//     when the caller (the simulator) chooses.
//
// # Not modelled
//
// Secondary indexes, Select, AttributesToGet, the legacy parameters (Expected,
// AttributeUpdates, KeyConditions, QueryFilter, ScanFilter, ConditionalOperator) and
// parallel scans are refused with a ValidationException whose message starts with
// "ddbmodel:". Not modelled at all: BatchGetItem, BatchWriteItem, TransactGetItems,
// PartiQL, table management beyond CreateTable (no DescribeTable, UpdateTimeToLive,
// streams), throughput and throttling, TransactionConflictException and
// TransactionInProgressException, ClientRequestToken, ConsumedCapacity and
// ItemCollectionMetrics, item collection size limits, the 4 MB transaction size limit,
// reserved words (the builder never sends a bare name), list index updates beyond SET
// and REMOVE, and the exact text of most error messages (the code, the kind of error
// and the too-large messages lockcore inspects are exact). Strings are ordered by their
// UTF-8 bytes, as the service documents; whether Local (Java, UTF-16) orders characters
// from U+E000 up against those beyond U+FFFF the same way is not tested. The conformance
// test exercises list values, list_append and size, but not list index updates, B keys
// or Scan pages.
//
// # Where DynamoDB Local differs from the documented service
//
// The model follows DynamoDB Local (the conformance oracle) except where noted. These
// were found by the conformance test and by probing Local directly; the service's side
// is what its documentation says, not measured.
//
//   - Local returns some numbers as they were written ("1e2", "5.0"): numbers nested in
//     maps and lists, numbers written by SET, numbers in a transaction's Put; canonical
//     text elsewhere. The documentation says leading and trailing zeros are trimmed;
//     the model always returns canonical text, and the conformance test compares
//     numbers by value.
//   - Local evaluates the conditions of a transaction with two actions on one item
//     (each action seeing the ones before it) and cancels it when one fails; only when
//     all hold does it refuse the request. The documentation says such a request is
//     refused; the model refuses it before reading anything, and the conformance test
//     sends distinct items only.
//   - Local omits the LastEvaluatedKey of a query page that its Limit ends on the last
//     item the key condition can match (a hash-only table's one item, or the item equal
//     to an inclusive bound), and returns one whenever else the Limit is reached. The
//     model follows Local. Callers must page until LastEvaluatedKey is empty either way.
//   - Local counts the 1 MB page against the items that pass the filter; the
//     documentation says the limit applies to the items read, before the filter. The
//     model follows Local.
//   - Local refuses an update whose declared values exceed 400 KB before evaluating
//     its condition, and refuses a transaction outright when one of its updates fails
//     to apply (a missing operand, a wrong type, a missing parent path). The model
//     follows Local.
package ddbmodel
