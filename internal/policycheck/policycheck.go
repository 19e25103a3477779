// Package policycheck holds each function's IAM policy in template.yaml to the calls its
// code makes. A handler package's tests run the handler's DynamoDB client through a
// Recorder, which notes the IAM action and the table (as its template logical id) of every
// request; after the package's tests, Run compares the recorded pairs with what the
// function's execution role grants on the resources its environment references:
//
//   - a recorded call the role does not grant fails the run (the deployed function would
//     get AccessDenied): add the action to the role, or drop the call;
//   - a granted action no test exercised fails the run as a stale permission (when every
//     test of the package ran): drop it from the role, exercise it in a test, or list it in
//     Allowlist with the reason it cannot be exercised.
//
// Use it from the handler package's TestMain:
//
//	var calls = policycheck.NewRecorder()
//
//	func TestMain(m *testing.M) { testenv.Main(policycheck.Run(m, "OrderProcessorFunction", calls)) }
//
// and build the handler's client with calls.Client(testenv.Client(t)); fixtures that seed
// or inspect tables keep a client of their own, so their calls are not the function's.
package policycheck

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/template"
)

// Call is one IAM action on one template resource.
type Call struct {
	Action   string // e.g. dynamodb:UpdateItem
	Resource string // template logical id, e.g. LockTable
}

func (c Call) String() string { return c.Action + " on " + c.Resource }

// Allowance is a granted action that the handler tests do not exercise, with the reason.
type Allowance struct {
	Function string // logical id
	Call
	Reason string
}

// Allowlist lists the granted actions the handler tests cannot exercise. Keep it short: a
// rare path is better exercised by a test (see the ambiguity tests of the handlers).
var Allowlist = []Allowance{}

// testTableName is testenv.Table's naming: <LogicalId>-<8 hex chars>.
var testTableName = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*)-[0-9a-f]{8}$`)

// Recorder records the IAM actions of the requests of the clients it wraps. It is safe
// for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls map[Call]int
	names map[string]string // resource name or URL -> logical id
	bad   []string          // requests whose resource could not be mapped
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{calls: map[Call]int{}, names: map[string]string{}}
}

// Name maps a resource name (a table name, a queue URL) to its template logical id, for
// names that do not follow testenv's <LogicalId>-<hex> pattern.
func (r *Recorder) Name(name, logicalID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[name] = logicalID
}

// Record records one action on the resource named name ("<table>/index/<index>" for an
// index: recorded as "<LogicalId>/index/<index>", which no grant on the table's Arn covers).
func (r *Recorder) Record(action, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.names[name] // a name given to Name as a whole (a queue URL) is never cut
	base, index, onIndex := "", "", false
	if !ok {
		base, index, onIndex = strings.Cut(name, IndexSep)
		id, ok = r.names[base]
	}
	if !ok {
		if m := testTableName.FindStringSubmatch(base); m != nil {
			id, ok = m[1], true
		}
	}
	if !ok {
		r.bad = append(r.bad, fmt.Sprintf("%s on %q: not a template resource name (testenv's <LogicalId>-<hex>, or one given to Name)", action, name))
		return
	}
	if onIndex {
		id += IndexSep + index
	}
	r.calls[Call{Action: action, Resource: id}]++
}

// Calls returns the recorded calls, sorted.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, 0, len(r.calls))
	for c := range r.calls {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Client returns a copy of c whose requests are recorded, with extra options (Fault, ...)
// applied after the recorder's.
func (r *Recorder) Client(c *dynamodb.Client, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(c.Options(), append([]func(*dynamodb.Options){r.Options}, optFns...)...)
}

// Options adds the recording middleware to a DynamoDB client's options.
func (r *Recorder) Options(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("policycheck.Record",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				for _, c := range DynamoDBActions(in.Parameters) {
					r.Record(c.Action, c.Resource)
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	})
}

// IndexSep joins a table and one of its indexes in a Call's Resource: a Query or Scan of
// an index is authorized on the index's ARN (table/NAME/index/INDEX), which a grant on the
// table's ARN does not cover.
const IndexSep = "/index/"

// onIndex is the call of a Query or Scan: on the table, or on its index when the request
// names one.
func onIndex(action string, table, index *string) []Call {
	r := aws.ToString(table)
	if index != nil {
		r += IndexSep + aws.ToString(index)
	}
	return []Call{{Action: action, Resource: r}}
}

// DynamoDBActions returns the IAM actions, with the table names they apply to (in
// Resource), that IAM authorizes for one DynamoDB request: one per table for most
// operations, one per item for transactions (TransactWriteItems needs PutItem, UpdateItem,
// DeleteItem or ConditionCheckItem on each item's table; TransactGetItems GetItem). A Query
// or Scan of an index applies to "<table>/index/<index>" (IndexSep).
func DynamoDBActions(in any) []Call {
	one := func(action string, table *string) []Call {
		return []Call{{Action: action, Resource: aws.ToString(table)}}
	}
	switch x := in.(type) {
	case *dynamodb.GetItemInput:
		return one("dynamodb:GetItem", x.TableName)
	case *dynamodb.PutItemInput:
		return one("dynamodb:PutItem", x.TableName)
	case *dynamodb.UpdateItemInput:
		return one("dynamodb:UpdateItem", x.TableName)
	case *dynamodb.DeleteItemInput:
		return one("dynamodb:DeleteItem", x.TableName)
	case *dynamodb.QueryInput:
		return onIndex("dynamodb:Query", x.TableName, x.IndexName)
	case *dynamodb.ScanInput:
		return onIndex("dynamodb:Scan", x.TableName, x.IndexName)
	case *dynamodb.DescribeTableInput:
		return one("dynamodb:DescribeTable", x.TableName)
	case *dynamodb.BatchGetItemInput:
		var out []Call
		for t := range x.RequestItems {
			out = append(out, Call{"dynamodb:BatchGetItem", t})
		}
		return out
	case *dynamodb.BatchWriteItemInput:
		var out []Call
		for t := range x.RequestItems {
			out = append(out, Call{"dynamodb:BatchWriteItem", t})
		}
		return out
	case *dynamodb.TransactWriteItemsInput:
		var out []Call
		for _, it := range x.TransactItems {
			switch {
			case it.Put != nil:
				out = append(out, one("dynamodb:PutItem", it.Put.TableName)...)
			case it.Update != nil:
				out = append(out, one("dynamodb:UpdateItem", it.Update.TableName)...)
			case it.Delete != nil:
				out = append(out, one("dynamodb:DeleteItem", it.Delete.TableName)...)
			case it.ConditionCheck != nil:
				out = append(out, one("dynamodb:ConditionCheckItem", it.ConditionCheck.TableName)...)
			}
		}
		return out
	case *dynamodb.TransactGetItemsInput:
		var out []Call
		for _, it := range x.TransactItems {
			if it.Get != nil {
				out = append(out, one("dynamodb:GetItem", it.Get.TableName)...)
			}
		}
		return out
	}
	// An operation this function does not know: record it under its type so the
	// comparison fails and names it.
	return []Call{{Action: fmt.Sprintf("dynamodb:<unmapped %T>", in), Resource: "?"}}
}

// Fault returns a client option that makes the requests matching match ambiguous, as a
// network or server fault after the engine applied the request would: the request is sent
// and applied, then the caller gets an HTTP 500 InternalServerError instead of the answer.
// At most n requests are hit. The engine's semantics are untouched; only the answer is
// lost.
func Fault(n int, match func(in any) bool) func(*dynamodb.Options) {
	var left atomic.Int64
	left.Store(int64(n))
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("policycheck.Fault",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					if err == nil && match(in.Parameters) && left.Add(-1) >= 0 {
						return middleware.InitializeOutput{}, md, &smithy.GenericAPIError{
							Code: "InternalServerError", Message: "policycheck: injected fault after the request was applied", Fault: smithy.FaultServer,
						}
					}
					return out, md, err
				}), middleware.After)
		})
	}
}

// Runner runs a package's tests; *testing.M is one.
type Runner interface{ Run() int }

type checked struct {
	m        Runner
	function string
	rec      *Recorder
	out      io.Writer
	complete func() bool
}

// Run returns a Runner that runs m's tests and then compares the calls rec recorded with
// the policy of function (a logical id of template.yaml). The run fails (exit code 1) when
// a recorded call is not granted, and — when every test ran (no -run or -skip) and passed
// — when a granted action was not recorded and is not in Allowlist.
func Run(m Runner, function string, rec *Recorder) Runner {
	return &checked{m: m, function: function, rec: rec, out: os.Stderr, complete: fullRun}
}

// fullRun reports whether the test binary runs every test (no -run, -skip or -short).
func fullRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	if f := flag.Lookup("test.short"); f != nil && f.Value.String() == "true" {
		return false
	}
	return true
}

func (c *checked) Run() int {
	code := c.m.Run()
	tpl, err := template.LoadDefault()
	if err != nil {
		fmt.Fprintf(c.out, "policycheck: %v\n", err)
		return 1
	}
	problems, err := Compare(tpl, c.function, c.rec, code == 0 && c.complete())
	if err != nil {
		fmt.Fprintf(c.out, "policycheck: %s: %v\n", c.function, err)
		return 1
	}
	if len(problems) > 0 {
		fmt.Fprintf(c.out, "--- FAIL: policycheck: %s: the calls of the handler tests and the function's role in template.yaml differ:\n", c.function)
		for _, p := range problems {
			fmt.Fprintf(c.out, "    %s\n", p)
		}
		return 1
	}
	if code == 0 && !c.complete() && len(c.rec.Calls()) > 0 {
		fmt.Fprintf(c.out, "policycheck: %s: not every test ran (-run/-skip/-short): stale permissions not checked, recorded calls are granted\n", c.function)
	}
	return code
}

// Compare returns the differences between the calls rec recorded and the grants of
// function's role on the resources its environment references (the tables and queues its
// code uses). With stale set, granted actions that were not recorded and are not in
// Allowlist are differences too, as are Allowlist entries that were recorded after all.
func Compare(tpl *template.Template, function string, rec *Recorder, stale bool) ([]string, error) {
	f, err := stack.LookupFunction(tpl, function)
	if err != nil {
		return nil, err
	}
	granted, err := CodeGrants(tpl, f)
	if err != nil {
		return nil, err
	}
	var problems []string
	rec.mu.Lock()
	problems = append(problems, rec.bad...)
	rec.mu.Unlock()
	recorded := map[Call]bool{}
	for _, c := range rec.Calls() {
		recorded[c] = true
		if !granted[c] {
			problems = append(problems, fmt.Sprintf("the code calls %s, which the role does not grant: add it to the role in template.yaml (or drop the call)", c))
		}
	}
	if !stale {
		return problems, nil
	}
	allowed := map[Call]string{}
	for _, a := range Allowlist {
		if a.Function == function {
			allowed[a.Call] = a.Reason
			if recorded[a.Call] {
				problems = append(problems, fmt.Sprintf("%s is in policycheck.Allowlist but the tests exercise it: drop the entry", a.Call))
			}
		}
	}
	var grants []Call
	for g := range granted {
		grants = append(grants, g)
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].String() < grants[j].String() })
	for _, g := range grants {
		if !recorded[g] {
			if _, ok := allowed[g]; !ok {
				problems = append(problems, fmt.Sprintf("the role grants %s, which no test exercised: a stale permission? drop it, exercise it in a test, or allowlist it with the reason", g))
			}
		}
	}
	return problems, nil
}

// CodeGrants returns the actions the function's role grants on the resources its
// environment references (by Ref: tables, queues), as Calls. Grants on event sources,
// destinations, the log group and "*" are Lambda's, not the code's (internal/stack's
// TestExecutionRoles checks those).
func CodeGrants(tpl *template.Template, f stack.Function) (map[Call]bool, error) {
	refs, err := stack.References(f.Environment(), "Environment")
	if err != nil {
		return nil, err
	}
	env := map[string]bool{}
	for _, r := range refs {
		if _, ok := tpl.Resources[r.Target]; ok {
			env[r.Target] = true
		}
	}
	// A queue that is both an event source and in the environment (the order processor
	// changes the visibility of the messages it returns): the event source mapping's own
	// polling actions are Lambda's, not the code's.
	poller := map[Call]bool{}
	for _, e := range f.Events() {
		if e.Type != "SQS" {
			continue
		}
		refs, err := stack.References(e.Properties["Queue"], e.Name+"/Queue")
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			for _, a := range SQSPollerActions {
				poller[Call{Action: a, Resource: r.Target}] = true
			}
		}
	}
	grants, err := stack.FunctionGrants(tpl, f)
	if err != nil {
		return nil, err
	}
	out := map[Call]bool{}
	for _, g := range grants {
		c := Call{Action: g.Action, Resource: g.Target}
		if env[g.Target] && g.Attribute == "Arn" && !poller[c] && (strings.HasPrefix(g.Action, "dynamodb:") || strings.HasPrefix(g.Action, "sqs:")) {
			out[c] = true
		}
	}
	return out, nil
}

// SQSPollerActions are the actions Lambda's SQS event source mapping makes with the
// function's role (sqs:ChangeMessageVisibility is granted to it too, but code may call it:
// it stays the code's when the environment references the queue).
var SQSPollerActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
