package ddbmodel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Schema is a table's primary key: string attributes only.
type Schema struct {
	HashKey  string // the partition key's name
	RangeKey string // the sort key's name; "" for a table with a partition key only
}

// LockSchema is lockcore's lock table (and its tests' data tables): pk and sk.
var LockSchema = Schema{HashKey: "pk", RangeKey: "sk"}

func (s Schema) keyNames() []string {
	if s.RangeKey == "" {
		return []string{s.HashKey}
	}
	return []string{s.HashKey, s.RangeKey}
}

// DB is an in-memory DynamoDB: a set of tables behind the six calls lockcore makes
// (and Scan). It is safe for concurrent use; it has no goroutines and no clock, so
// given the same calls in the same order it gives the same answers.
type DB struct {
	mu        sync.Mutex
	tables    map[string]*Table
	seq       uint64 // number of the latest write (each write, transaction and TTL deletion has one)
	window    uint64
	staleness Staleness
}

// Option configures a DB.
type Option func(*DB)

// WithStaleness sets the policy that picks what eventually consistent reads see
// (default: the latest state, as DynamoDB Local serves them).
func WithStaleness(s Staleness) Option { return func(db *DB) { db.staleness = s } }

// WithHistory sets how many writes back eventually consistent reads can reach (default
// 1024): versions of items older than that are dropped.
func WithHistory(writes uint64) Option { return func(db *DB) { db.window = writes } }

// New returns an empty DB.
func New(opts ...Option) *DB {
	db := &DB{tables: map[string]*Table{}, window: 1024, staleness: Latest{}}
	for _, o := range opts {
		o(db)
	}
	return db
}

// CreateTable adds an empty table.
func (db *DB) CreateTable(name string, schema Schema) (*Table, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if schema.HashKey == "" || schema.HashKey == schema.RangeKey {
		return nil, validationf("invalid key schema %+v", schema)
	}
	if _, ok := db.tables[name]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("Cannot create preexisting table")}
	}
	t := &Table{db: db, name: name, schema: schema, parts: map[string]*partition{}}
	db.tables[name] = t
	return t, nil
}

// Table returns the table of that name (nil: none).
func (db *DB) Table(name string) *Table {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.tables[name]
}

// Seq returns the number of the latest write: a simulator can note it with its own
// clock to build a time-based Staleness policy.
func (db *DB) Seq() uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.seq
}

func (db *DB) oldest() uint64 {
	if db.seq > db.window {
		return db.seq - db.window
	}
	return 0
}

// Table is one table of a DB.
type Table struct {
	db     *DB
	name   string
	schema Schema
	parts  map[string]*partition
}

// Name returns the table's name.
func (t *Table) Name() string { return t.name }

// Schema returns the table's key schema.
func (t *Table) Schema() Schema { return t.schema }

type partition struct {
	recs map[string]*record
	sks  []string // sort keys of recs, in order
}

// record is one key's history: versions in write order, the last the latest (a nil item
// is a deletion).
type record struct {
	versions []version
}

type version struct {
	seq  uint64
	item Item
}

func (r *record) latest() Item { return r.versions[len(r.versions)-1].item }

// at returns the item as it was after write seq (nil: absent). Pruning keeps the last
// version at or before the oldest seq a read may ask for, so this is exact.
func (r *record) at(seq uint64) Item {
	for i := len(r.versions) - 1; i >= 0; i-- {
		if r.versions[i].seq <= seq {
			return r.versions[i].item
		}
	}
	return nil // written first after seq
}

func (t *Table) keyOf(it Item) (pk, sk string) {
	pk = it[t.schema.HashKey].(*types.AttributeValueMemberS).Value
	if t.schema.RangeKey != "" {
		sk = it[t.schema.RangeKey].(*types.AttributeValueMemberS).Value
	}
	return pk, sk
}

// itemID names an item across tables.
func (t *Table) itemID(key Item) string {
	pk, sk := t.keyOf(key)
	return t.name + "\x00" + pk + "\x00" + sk
}

func (t *Table) record(pk, sk string) *record {
	p := t.parts[pk]
	if p == nil {
		return nil
	}
	return p.recs[sk]
}

func (t *Table) latest(key Item) Item {
	pk, sk := t.keyOf(key)
	if r := t.record(pk, sk); r != nil {
		return r.latest()
	}
	return nil
}

// write records it (nil: deleted) as the item at key after write seq, and drops
// versions no read can reach any more.
func (t *Table) write(key Item, it Item, seq uint64) {
	pk, sk := t.keyOf(key)
	p := t.parts[pk]
	if p == nil {
		p = &partition{recs: map[string]*record{}}
		t.parts[pk] = p
	}
	r := p.recs[sk]
	if r == nil {
		if it == nil && t.db.window == 0 {
			return
		}
		r = &record{}
		p.recs[sk] = r
		i, _ := slices.BinarySearch(p.sks, sk)
		p.sks = slices.Insert(p.sks, i, sk)
	}
	r.versions = append(r.versions, version{seq: seq, item: it})
	t.prune(pk, sk, r)
}

func (t *Table) prune(pk, sk string, r *record) {
	cut := t.db.oldest()
	// Keep the last version at or before cut (it is what a read at cut sees) and all
	// after it.
	keep := 0
	for i := len(r.versions) - 1; i >= 0; i-- {
		if r.versions[i].seq <= cut {
			keep = i
			break
		}
	}
	if keep > 0 {
		r.versions = slices.Delete(r.versions, 0, keep)
	}
	if len(r.versions) == 1 && r.versions[0].item == nil && r.versions[0].seq <= cut {
		p := t.parts[pk]
		delete(p.recs, sk)
		i, _ := slices.BinarySearch(p.sks, sk)
		p.sks = slices.Delete(p.sks, i, i+1)
		if len(p.recs) == 0 {
			delete(t.parts, pk)
		}
	}
}

// Items returns every item of the table as it is now, in key order (copies).
func (t *Table) Items() []Item {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	var out []Item
	for _, pk := range sortedKeys(t.parts) {
		p := t.parts[pk]
		for _, sk := range p.sks {
			if it := p.recs[sk].latest(); it != nil {
				out = append(out, cloneItem(it))
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// request checks ----------------------------------------------------------------

func (db *DB) table(name *string) (*Table, error) {
	if name == nil || *name == "" {
		return nil, validation("1 validation error detected: Value null at 'tableName' failed to satisfy constraint: Member must not be null")
	}
	t := db.tables[*name]
	if t == nil {
		return nil, notFound()
	}
	return t, nil
}

// checkKey validates a Key parameter: exactly the key attributes, strings, not empty.
func (t *Table) checkKey(key Item) error {
	names := t.schema.keyNames()
	if len(key) != len(names) {
		return validation("The provided key element does not match the schema")
	}
	for _, n := range names {
		v, ok := key[n]
		if !ok {
			return validation("The provided key element does not match the schema")
		}
		if err := t.checkKeyValue(n, v); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) checkKeyValue(n string, v AV) error {
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		if msg := checkValue(v); msg != "" {
			return validation(msg)
		}
		return validationf("One or more parameter values were invalid: Type mismatch for key %s expected: S actual: %s", n, typeOf(v))
	}
	if s.Value == "" {
		return validationf("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: %s", n)
	}
	if n == t.schema.HashKey && len(s.Value) > 2048 {
		return validation("One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of 2048 bytes")
	}
	if n == t.schema.RangeKey && len(s.Value) > 1024 {
		return validation("One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes")
	}
	return nil
}

// checkItem validates a PutItem item: the key attributes and every value.
func (t *Table) checkItem(it Item) error {
	for _, n := range t.schema.keyNames() {
		v, ok := it[n]
		if !ok {
			return validationf("One or more parameter values were invalid: Missing the key %s in the item", n)
		}
		if err := t.checkKeyValue(n, v); err != nil {
			return err
		}
	}
	for _, n := range sortedNames(it) {
		if msg := checkValue(it[n]); msg != "" {
			return validation(msg)
		}
	}
	return nil
}

func (t *Table) keyItem(key Item) Item {
	out := Item{}
	for _, n := range t.schema.keyNames() {
		out[n] = normal(key[n])
	}
	return out
}

func checkValues(values map[string]AV) error {
	for _, k := range sortedKeys(values) {
		if msg := checkValue(values[k]); msg != "" {
			return validationf("ExpressionAttributeValues contains invalid value: %s for key %s", msg, k)
		}
	}
	return nil
}

// parsed holds a request's parsed expressions.
type parsed struct {
	cond   cond
	update *updateExpr
	proj   []docPath
	filter cond
}

// parseExprs parses a request's expressions against its names and values and makes the
// checks DynamoDB makes before it reads an item.
func parseExprs(names map[string]string, values map[string]AV, condition, update, projection, filter *string) (parsed, error) {
	var out parsed
	if err := checkValues(values); err != nil {
		return out, err
	}
	ctx := newExprContext(names, values)
	var err error
	if condition != nil {
		if out.cond, err = parse(ctx, "ConditionExpression", *condition, (*parser).condition); err != nil {
			return out, validation(err.Error())
		}
	}
	if update != nil {
		u, err := parse(ctx, "UpdateExpression", *update, (*parser).update)
		if err != nil {
			return out, validation(err.Error())
		}
		out.update = &u
	}
	if projection != nil {
		if out.proj, err = parseProjection(ctx, *projection); err != nil {
			return out, err
		}
	}
	if filter != nil {
		if out.filter, err = parse(ctx, "FilterExpression", *filter, (*parser).condition); err != nil {
			return out, validation(err.Error())
		}
	}
	if len(names) > 0 || len(values) > 0 {
		if condition == nil && update == nil && projection == nil && filter == nil {
			if len(names) > 0 {
				return out, validation("ExpressionAttributeNames can only be specified when using expressions")
			}
			return out, validation("ExpressionAttributeValues can only be specified when using expressions")
		}
	}
	if msg := ctx.checkUnused(); msg != "" {
		return out, validation(msg)
	}
	return out, nil
}

func parseProjection(ctx *exprContext, src string) ([]docPath, error) {
	ps, err := parse(ctx, "ProjectionExpression", src, (*parser).projection)
	if err != nil {
		return nil, validation(err.Error())
	}
	if msg := checkOverlap(ps); msg != "" {
		return nil, validation("Invalid ProjectionExpression: " + msg)
	}
	return ps, nil
}

func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return nil
	}
	return ctx.Err()
}

// operations -------------------------------------------------------------------------

// GetItem reads one item.
func (db *DB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	const op = "GetItem"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(in.TableName)
	if err != nil {
		return nil, opError(op, err)
	}
	if len(in.AttributesToGet) > 0 {
		return nil, opError(op, validation("ddbmodel: AttributesToGet is not modelled"))
	}
	if err := t.checkKey(in.Key); err != nil {
		return nil, opError(op, err)
	}
	px, err := parseExprs(in.ExpressionAttributeNames, nil, nil, nil, in.ProjectionExpression, nil)
	if err != nil {
		return nil, opError(op, err)
	}
	pk, sk := t.keyOf(in.Key)
	var it Item
	if r := t.record(pk, sk); r != nil {
		if aws.ToBool(in.ConsistentRead) {
			it = r.latest()
		} else {
			it = r.at(db.readSeq(Read{Op: op, Table: t.name, PK: pk, SK: sk}))
		}
	}
	out := &dynamodb.GetItemOutput{}
	if it != nil {
		if px.proj != nil {
			out.Item = project(it, px.proj)
		} else {
			out.Item = cloneItem(it)
		}
	}
	return out, nil
}

func (db *DB) readSeq(r Read) uint64 {
	s := db.staleness.ReadSeq(r, db.oldest(), db.seq)
	return min(max(s, db.oldest()), db.seq)
}

// PutItem writes a whole item.
func (db *DB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	const op = "PutItem"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	switch in.ReturnValues {
	case "", types.ReturnValueNone, types.ReturnValueAllOld:
	default:
		return nil, opError(op, validation("Return values set to invalid value"))
	}
	t, w, err := db.preparePut(in.TableName, in.Item, in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, in.Expected, in.ReturnValuesOnConditionCheckFailure, true)
	if err != nil {
		return nil, opError(op, err)
	}
	old, _, err := w.apply(t)
	if err != nil {
		return nil, opError(op, err)
	}
	db.seq++
	t.write(w.key, w.newItem, db.seq)
	out := &dynamodb.PutItemOutput{}
	if in.ReturnValues == types.ReturnValueAllOld && old != nil {
		out.Attributes = cloneItem(old)
	}
	return out, nil
}

// write is one prepared write: its key, its parsed expressions, and (once applied) the
// item it leaves.
type write struct {
	kind    string // "Put", "Update", "Delete", "ConditionCheck"
	key     Item
	put     Item
	px      parsed
	rvFail  types.ReturnValuesOnConditionCheckFailure
	newItem Item
}

// preparePut checks a put. DynamoDB Local checks a PutItem's size before its
// expressions, and a transaction's Put after them (sizeFirst).
func (db *DB) preparePut(table *string, item Item, condition *string, names map[string]string, values map[string]AV, expected map[string]types.ExpectedAttributeValue, rvFail types.ReturnValuesOnConditionCheckFailure, sizeFirst bool) (*Table, *write, error) {
	t, err := db.table(table)
	if err != nil {
		return nil, nil, err
	}
	if len(expected) > 0 {
		return nil, nil, validation("ddbmodel: Expected (legacy conditions) is not modelled")
	}
	if err := t.checkItem(item); err != nil {
		return nil, nil, err
	}
	it := cloneItem(item)
	if sizeFirst && ItemSize(it) > MaxItemSize {
		return nil, nil, validation(MsgItemTooLarge)
	}
	px, err := parseExprs(names, values, condition, nil, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if ItemSize(it) > MaxItemSize {
		return nil, nil, validation(MsgItemTooLarge)
	}
	return t, &write{kind: "Put", key: t.keyItem(item), put: it, px: px, rvFail: rvFail}, nil
}

func (db *DB) prepareUpdate(table *string, key Item, condition, update *string, names map[string]string, values map[string]AV, rvFail types.ReturnValuesOnConditionCheckFailure) (*Table, *write, error) {
	t, err := db.table(table)
	if err != nil {
		return nil, nil, err
	}
	if err := t.checkKey(key); err != nil {
		return nil, nil, err
	}
	px, err := parseExprs(names, values, condition, update, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if px.update == nil {
		px.update = &updateExpr{}
	}
	if msg := checkUpdate(px.update); msg != "" {
		return nil, nil, validation(msg)
	}
	if px.update.declaredSize() > MaxItemSize {
		return nil, nil, validation(MsgUpdateTooLarge)
	}
	return t, &write{kind: "Update", key: t.keyItem(key), px: px, rvFail: rvFail}, nil
}

func (db *DB) prepareDelete(table *string, key Item, condition *string, names map[string]string, values map[string]AV, rvFail types.ReturnValuesOnConditionCheckFailure, kind string) (*Table, *write, error) {
	t, err := db.table(table)
	if err != nil {
		return nil, nil, err
	}
	if err := t.checkKey(key); err != nil {
		return nil, nil, err
	}
	if kind == "ConditionCheck" && condition == nil {
		return nil, nil, validation("1 validation error detected: Value null at 'transactItems.1.member.conditionCheck.conditionExpression' failed to satisfy constraint: Member must not be null")
	}
	px, err := parseExprs(names, values, condition, nil, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return t, &write{kind: kind, key: t.keyItem(key), px: px, rvFail: rvFail}, nil
}

// apply evaluates w against the latest item: the condition, then the write, then the
// new item's size. It returns the old item and whether the condition failed (err is
// then a ConditionalCheckFailedException); on success w.newItem holds the new item
// (nil: deleted).
func (w *write) apply(t *Table) (old Item, condFailed bool, err error) {
	old, condFailed, err = w.evaluate(t, t.latest(w.key))
	var ke *keyUpdateError
	if errors.As(err, &ke) {
		err = validation(ke.msg)
	}
	if err == nil {
		err = w.checkSize()
	}
	return old, condFailed, err
}

// evaluate is apply without the size check, on old as the item's current state.
func (w *write) evaluate(t *Table, old Item) (Item, bool, error) {
	if w.px.cond != nil && !evalCond(old, w.px.cond) {
		return old, true, conditionFailed(old, w.rvFail)
	}
	switch w.kind {
	case "Put":
		w.newItem = w.put
	case "Delete":
		w.newItem = nil
	case "ConditionCheck":
		w.newItem = old
	case "Update":
		if msg := checkKeyUpdate(w.px.update, t.schema.keyNames()); msg != "" {
			return old, false, &keyUpdateError{msg}
		}
		nw, err := applyUpdate(old, w.key, w.px.update)
		if err != nil {
			return old, false, validation(err.Error())
		}
		w.newItem = nw
	}
	return old, false, nil
}

// checkSize refuses an update that leaves the item larger than 400 KB (a Put's size
// was checked before).
func (w *write) checkSize() error {
	if w.kind == "Update" && ItemSize(w.newItem) > MaxItemSize {
		return validation(MsgUpdateTooLarge)
	}
	return nil
}

// keyUpdateError is an update that writes a key attribute.
type keyUpdateError struct{ msg string }

func (e *keyUpdateError) Error() string { return e.msg }

// UpdateItem edits an item's attributes, creating it if needed.
func (db *DB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	const op = "UpdateItem"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(in.AttributeUpdates) > 0 || len(in.Expected) > 0 {
		return nil, opError(op, validation("ddbmodel: AttributeUpdates and Expected (legacy parameters) are not modelled"))
	}
	t, w, err := db.prepareUpdate(in.TableName, in.Key, in.ConditionExpression, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, in.ReturnValuesOnConditionCheckFailure)
	if err != nil {
		return nil, opError(op, err)
	}
	switch in.ReturnValues {
	case "", types.ReturnValueNone, types.ReturnValueAllOld, types.ReturnValueAllNew, types.ReturnValueUpdatedOld, types.ReturnValueUpdatedNew:
	default:
		return nil, opError(op, validationf("1 validation error detected: Value '%s' at 'returnValues' failed to satisfy constraint: Member must satisfy enum value set: [ALL_NEW, UPDATED_OLD, ALL_OLD, NONE, UPDATED_NEW]", in.ReturnValues))
	}
	old, _, err := w.apply(t)
	if err != nil {
		return nil, opError(op, err)
	}
	db.seq++
	t.write(w.key, w.newItem, db.seq)
	out := &dynamodb.UpdateItemOutput{}
	switch in.ReturnValues {
	case types.ReturnValueAllOld:
		if old != nil {
			out.Attributes = cloneItem(old)
		}
	case types.ReturnValueAllNew:
		out.Attributes = cloneItem(w.newItem)
	case types.ReturnValueUpdatedOld, types.ReturnValueUpdatedNew:
		// DynamoDB Local returns the whole top-level attribute of each written path
		// that exists before (UPDATED_OLD) or after (UPDATED_NEW) the update.
		src := w.newItem
		if in.ReturnValues == types.ReturnValueUpdatedOld {
			src = old
		}
		attrs := Item{}
		for _, p := range w.px.update.targets() {
			if _, ok := resolve(src, p); ok {
				attrs[p[0].name] = normal(src[p[0].name])
			}
		}
		if len(attrs) > 0 {
			out.Attributes = attrs
		}
	}
	return out, nil
}

// DeleteItem deletes an item.
func (db *DB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	const op = "DeleteItem"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(in.Expected) > 0 {
		return nil, opError(op, validation("ddbmodel: Expected (legacy conditions) is not modelled"))
	}
	t, w, err := db.prepareDelete(in.TableName, in.Key, in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, in.ReturnValuesOnConditionCheckFailure, "Delete")
	if err != nil {
		return nil, opError(op, err)
	}
	switch in.ReturnValues {
	case "", types.ReturnValueNone, types.ReturnValueAllOld:
	default:
		return nil, opError(op, validation("ReturnValues can only be ALL_OLD or NONE"))
	}
	old, _, err := w.apply(t)
	if err != nil {
		return nil, opError(op, err)
	}
	out := &dynamodb.DeleteItemOutput{}
	if old != nil {
		db.seq++
		t.write(w.key, nil, db.seq)
		if in.ReturnValues == types.ReturnValueAllOld {
			out.Attributes = cloneItem(old)
		}
	}
	return out, nil
}

// TransactWriteItems applies up to 100 writes atomically, or none.
func (db *DB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	const op = "TransactWriteItems"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	n := len(in.TransactItems)
	if n == 0 || n > 100 {
		return nil, opError(op, validation("1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to 100, Member must have length greater than or equal to 1"))
	}
	type action struct {
		t *Table
		w *write
	}
	acts := make([]action, n)
	for i, ti := range in.TransactItems {
		count := 0
		var t *Table
		var w *write
		var err error
		if c := ti.ConditionCheck; c != nil {
			count++
			t, w, err = db.prepareDelete(c.TableName, c.Key, c.ConditionExpression, c.ExpressionAttributeNames, c.ExpressionAttributeValues, c.ReturnValuesOnConditionCheckFailure, "ConditionCheck")
		}
		if p := ti.Put; p != nil {
			count++
			t, w, err = db.preparePut(p.TableName, p.Item, p.ConditionExpression, p.ExpressionAttributeNames, p.ExpressionAttributeValues, nil, p.ReturnValuesOnConditionCheckFailure, false)
		}
		if u := ti.Update; u != nil {
			count++
			t, w, err = db.prepareUpdate(u.TableName, u.Key, u.ConditionExpression, u.UpdateExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues, u.ReturnValuesOnConditionCheckFailure)
			if err == nil && u.UpdateExpression == nil {
				err = validationf("1 validation error detected: Value null at 'transactItems.%d.member.update.updateExpression' failed to satisfy constraint: Member must not be null", i+1)
			}
		}
		if d := ti.Delete; d != nil {
			count++
			t, w, err = db.prepareDelete(d.TableName, d.Key, d.ConditionExpression, d.ExpressionAttributeNames, d.ExpressionAttributeValues, d.ReturnValuesOnConditionCheckFailure, "Delete")
		}
		if count != 1 {
			return nil, opError(op, validation("TransactItems can only contain one of Check, Put, Update or Delete"))
		}
		if err != nil {
			return nil, opError(op, err)
		}
		acts[i] = action{t, w}
	}
	// Two actions on one item are refused before anything is read. (DynamoDB Local
	// evaluates the conditions first, with each action seeing the ones before it, and
	// cancels when one fails; the service refuses such a request outright.)
	seen := map[string]bool{}
	for _, a := range acts {
		id := a.t.itemID(a.w.key)
		if seen[id] {
			return nil, opError(op, validation("Transaction request cannot include multiple operations on one item"))
		}
		seen[id] = true
	}
	// Then, in order, each action's condition (a failure is a reason, and the rest
	// still run) and its update (a key attribute cancels the transaction with that one
	// ValidationError reason; any other failure to apply refuses the request; an item
	// left too large is a ValidationError reason).
	reasons := make([]types.CancellationReason, n)
	failed := false
	for i, a := range acts {
		old, condFailed, err := a.w.evaluate(a.t, a.t.latest(a.w.key))
		switch {
		case condFailed:
			failed = true
			reasons[i] = types.CancellationReason{Code: aws.String("ConditionalCheckFailed"), Message: aws.String(msgConditionFailed)}
			if a.w.rvFail == types.ReturnValuesOnConditionCheckFailureAllOld && old != nil {
				reasons[i].Item = cloneItem(old)
			}
		case err != nil:
			var ke *keyUpdateError
			if errors.As(err, &ke) {
				return nil, opError(op, cancelled([]types.CancellationReason{{Code: aws.String("ValidationError"), Message: aws.String(ke.msg)}}))
			}
			return nil, opError(op, err)
		default:
			reasons[i] = types.CancellationReason{Code: aws.String("None")}
			if err := a.w.checkSize(); err != nil {
				failed = true
				reasons[i] = types.CancellationReason{Code: aws.String("ValidationError"), Message: aws.String(MsgUpdateTooLarge)}
			}
		}
	}
	if failed {
		return nil, opError(op, cancelled(reasons))
	}
	db.seq++
	for _, a := range acts {
		if a.w.kind == "ConditionCheck" {
			continue
		}
		if a.w.kind == "Delete" && a.t.latest(a.w.key) == nil {
			continue
		}
		a.t.write(a.w.key, a.w.newItem, db.seq)
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func apiMessage(err error) string {
	if e, ok := err.(interface{ ErrorMessage() string }); ok {
		return e.ErrorMessage()
	}
	return err.Error()
}

// reads over many items ---------------------------------------------------------------

// maxPage is the most data one Query or Scan page reads (1 MB).
const maxPage = 1 << 20

// keyCond is a parsed KeyConditionExpression.
type keyCond struct {
	pk    string
	skOp  string // "", "=", "<", "<=", ">", ">=", "BETWEEN", "begins_with"
	sk1   string
	sk2   string
	hasSK bool
}

// upper is the inclusive upper bound of a <= or BETWEEN condition.
func (k keyCond) upper() string {
	if k.skOp == "BETWEEN" {
		return k.sk2
	}
	return k.sk1
}

func (k keyCond) match(sk string) bool {
	switch k.skOp {
	case "":
		return true
	case "=":
		return sk == k.sk1
	case "<":
		return sk < k.sk1
	case "<=":
		return sk <= k.sk1
	case ">":
		return sk > k.sk1
	case ">=":
		return sk >= k.sk1
	case "BETWEEN":
		return sk >= k.sk1 && sk <= k.sk2
	case "begins_with":
		return strings.HasPrefix(sk, k.sk1)
	}
	return false
}

func (t *Table) parseKeyCond(ctx *exprContext, src *string) (keyCond, error) {
	var kc keyCond
	if src == nil {
		return kc, validation("Either the KeyConditions or KeyConditionExpression parameter must be specified in the request.")
	}
	c, err := parse(ctx, "KeyConditionExpression", *src, (*parser).condition)
	if err != nil {
		return kc, validation(err.Error())
	}
	var parts []cond
	var flatten func(c cond) error
	flatten = func(c cond) error {
		switch c := c.(type) {
		case condAnd:
			if err := flatten(c.a); err != nil {
				return err
			}
			return flatten(c.b)
		case condOr:
			return validation("Invalid operator used in KeyConditionExpression: OR")
		case condNot:
			return validation("Invalid operator used in KeyConditionExpression: NOT")
		}
		parts = append(parts, c)
		return nil
	}
	if err := flatten(c); err != nil {
		return kc, err
	}
	if len(parts) > 2 {
		return kc, validation("Conditions can be of length 1 or 2 only")
	}
	keyAttr := func(o operand) (string, bool) {
		p, ok := o.(opPath)
		if !ok || len(p.path) != 1 {
			return "", false
		}
		return p.path[0].name, true
	}
	strVal := func(o operand) (string, error) {
		v, ok := o.(opValue)
		if !ok {
			return "", validation("Invalid KeyConditionExpression: Syntax error; a key condition compares a key attribute with a value")
		}
		s, ok := v.v.(*types.AttributeValueMemberS)
		if !ok {
			return "", validation("One or more parameter values were invalid: Condition parameter type does not match schema type")
		}
		return s.Value, nil
	}
	havePK := false
	for _, p := range parts {
		var name, op string
		var vals []operand
		switch p := p.(type) {
		case condCmp:
			a, b := p.a, p.b
			n, ok := keyAttr(a)
			if !ok {
				return kc, validation("Invalid KeyConditionExpression: the left side of a key condition must be a key attribute")
			}
			name, op, vals = n, p.op, []operand{b}
		case condBetween:
			n, ok := keyAttr(p.a)
			if !ok {
				return kc, validation("Invalid KeyConditionExpression: BETWEEN needs a key attribute")
			}
			name, op, vals = n, "BETWEEN", []operand{p.lo, p.hi}
		case condFunc:
			if p.name != "begins_with" {
				return kc, validationf("Invalid KeyConditionExpression: Invalid function name; function: %s", p.name)
			}
			n, _ := keyAttr(p.args[0])
			name, op, vals = n, "begins_with", []operand{p.args[1]}
		default:
			return kc, validation("Invalid KeyConditionExpression: Invalid operator used in KeyConditionExpression")
		}
		if op == "<>" {
			return kc, validation("Unsupported operator on KeyConditionExpression: operator: <>")
		}
		ss := make([]string, len(vals))
		for i, v := range vals {
			if ss[i], err = strVal(v); err != nil {
				return kc, err
			}
		}
		switch name {
		case t.schema.HashKey:
			if op != "=" {
				return kc, validation("Query key condition not supported")
			}
			if havePK {
				return kc, validation("KeyConditionExpressions must only contain one condition per key")
			}
			havePK = true
			kc.pk = ss[0]
		case t.schema.RangeKey:
			if kc.hasSK {
				return kc, validation("KeyConditionExpressions must only contain one condition per key")
			}
			kc.hasSK = true
			kc.skOp = op
			kc.sk1 = ss[0]
			if len(ss) > 1 {
				kc.sk2 = ss[1]
				if kc.sk1 > kc.sk2 {
					return kc, validationf("Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower operand: AttributeValue: {S:%s}, upper operand: AttributeValue: {S:%s}", kc.sk1, kc.sk2)
				}
			}
		default:
			return kc, validationf("Query condition missed key schema element: %s", t.schema.HashKey)
		}
	}
	if !havePK {
		return kc, validationf("Query condition missed key schema element: %s", t.schema.HashKey)
	}
	return kc, nil
}

// Query reads a partition's items in sort key order.
func (db *DB) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	const op = "Query"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(in.TableName)
	if err != nil {
		return nil, opError(op, err)
	}
	if in.IndexName != nil || len(in.KeyConditions) > 0 || len(in.QueryFilter) > 0 || len(in.AttributesToGet) > 0 || (in.Select != "" && in.Select != types.SelectAllAttributes) {
		return nil, opError(op, validation("ddbmodel: indexes, Select and legacy parameters are not modelled"))
	}
	if err := checkValues(in.ExpressionAttributeValues); err != nil {
		return nil, opError(op, err)
	}
	ectx := newExprContext(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	kc, err := t.parseKeyCond(ectx, in.KeyConditionExpression)
	if err != nil {
		return nil, opError(op, err)
	}
	var px parsed
	if in.FilterExpression != nil {
		if px.filter, err = parse(ectx, "FilterExpression", *in.FilterExpression, (*parser).condition); err != nil {
			return nil, opError(op, validation(err.Error()))
		}
	}
	if in.ProjectionExpression != nil {
		if px.proj, err = parseProjection(ectx, *in.ProjectionExpression); err != nil {
			return nil, opError(op, err)
		}
	}
	if msg := ectx.checkUnused(); msg != "" {
		return nil, opError(op, validation(msg))
	}
	if in.Limit != nil && *in.Limit <= 0 {
		return nil, opError(op, validationf("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1", *in.Limit))
	}
	var startSK *string
	if in.ExclusiveStartKey != nil {
		if err := t.checkKey(in.ExclusiveStartKey); err != nil {
			return nil, opError(op, validationf("The provided starting key is invalid: %s", apiMessage(err)))
		}
		pk, sk := t.keyOf(in.ExclusiveStartKey)
		if pk != kc.pk {
			return nil, opError(op, validation("The provided starting key is invalid: The provided key element does not match the schema"))
		}
		startSK = &sk
	}
	seq := db.seq
	if !aws.ToBool(in.ConsistentRead) {
		seq = db.readSeq(Read{Op: op, Table: t.name, PK: kc.pk})
	}
	var cands []Item
	if p := t.parts[kc.pk]; p != nil {
		for _, sk := range p.sks {
			if !kc.match(sk) {
				continue
			}
			if it := p.recs[sk].at(seq); it != nil {
				cands = append(cands, it)
			}
		}
	}
	forward := in.ScanIndexForward == nil || *in.ScanIndexForward
	if !forward {
		slices.Reverse(cands)
	}
	if startSK != nil {
		i := 0
		for i < len(cands) {
			_, sk := t.keyOf(cands[i])
			if forward && sk > *startSK || !forward && sk < *startSK {
				break
			}
			i++
		}
		cands = cands[i:]
	}
	// DynamoDB Local leaves out the LastEvaluatedKey of a page that its Limit ends
	// when the page's last item is the last one the key condition can match: the
	// only item of a hash-only table, or the inclusive bound (<=, BETWEEN going
	// forward; >=, BETWEEN going back) itself.
	final := func(sk string) bool {
		switch {
		case t.schema.RangeKey == "":
			return true
		case forward:
			return (kc.skOp == "<=" || kc.skOp == "BETWEEN") && sk == kc.upper()
		default:
			return (kc.skOp == ">=" || kc.skOp == "BETWEEN") && sk == kc.sk1
		}
	}
	items, scanned, last := t.page(cands, in.Limit, px, final)
	return &dynamodb.QueryOutput{Items: items, Count: int32(len(items)), ScannedCount: scanned, LastEvaluatedKey: last}, nil
}

// page reads cands in order up to the limit and 1 MB, and applies the filter and the
// projection. final tells whether an item's sort key is the last the query can match.
func (t *Table) page(cands []Item, limit *int32, px parsed, final func(sk string) bool) (items []Item, scanned int32, last Item) {
	size := 0
	for i, it := range cands {
		scanned++
		if px.filter == nil || evalCond(it, px.filter) {
			// DynamoDB Local counts the 1 MB against the items that pass the filter
			// (the service counts every item it reads).
			size += ItemSize(it)
			if px.proj != nil {
				items = append(items, project(it, px.proj))
			} else {
				items = append(items, cloneItem(it))
			}
		}
		more := i < len(cands)-1
		_, sk := t.keyOf(it)
		if limit != nil && scanned >= *limit && (more || !final(sk)) || size >= maxPage && more {
			last = t.keyItem(it)
			break
		}
		if limit != nil && scanned >= *limit {
			break
		}
	}
	return items, scanned, last
}

// Scan reads the table's items, ordered by partition key and sort key (DynamoDB orders
// a scan by a hash of the partition key; no caller may depend on the order).
func (db *DB) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	const op = "Scan"
	if err := checkCtx(ctx); err != nil {
		return nil, opError(op, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(in.TableName)
	if err != nil {
		return nil, opError(op, err)
	}
	if in.IndexName != nil || len(in.ScanFilter) > 0 || len(in.AttributesToGet) > 0 || in.Segment != nil || in.TotalSegments != nil || (in.Select != "" && in.Select != types.SelectAllAttributes) {
		return nil, opError(op, validation("ddbmodel: indexes, segments, Select and legacy parameters are not modelled"))
	}
	px, err := parseExprs(in.ExpressionAttributeNames, in.ExpressionAttributeValues, nil, nil, in.ProjectionExpression, in.FilterExpression)
	if err != nil {
		return nil, opError(op, err)
	}
	if in.Limit != nil && *in.Limit <= 0 {
		return nil, opError(op, validationf("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1", *in.Limit))
	}
	var startPK, startSK string
	hasStart := in.ExclusiveStartKey != nil
	if hasStart {
		if err := t.checkKey(in.ExclusiveStartKey); err != nil {
			return nil, opError(op, validationf("The provided starting key is invalid: %s", apiMessage(err)))
		}
		startPK, startSK = t.keyOf(in.ExclusiveStartKey)
	}
	seq := db.seq
	if !aws.ToBool(in.ConsistentRead) {
		seq = db.readSeq(Read{Op: op, Table: t.name})
	}
	var cands []Item
	for _, pk := range sortedKeys(t.parts) {
		if hasStart && pk < startPK {
			continue
		}
		p := t.parts[pk]
		for _, sk := range p.sks {
			if hasStart && pk == startPK && sk <= startSK {
				continue
			}
			if it := p.recs[sk].at(seq); it != nil {
				cands = append(cands, it)
			}
		}
	}
	items, scanned, last := t.page(cands, in.Limit, px, func(string) bool { return false })
	return &dynamodb.ScanOutput{Items: items, Count: int32(len(items)), ScannedCount: scanned, LastEvaluatedKey: last}, nil
}

// String names the table for messages.
func (t *Table) String() string { return fmt.Sprintf("table %s %+v", t.name, t.schema) }
