package policycheck

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDynamoDBActions(t *testing.T) {
	s := aws.String
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: s("InventoryTable-00000001")}},
		{Update: &types.Update{TableName: s("InventoryTable-00000001")}},
		{Delete: &types.Delete{TableName: s("OrdersTable-00000002")}},
		{ConditionCheck: &types.ConditionCheck{TableName: s("LockTable-00000003")}},
	}}
	var got []string
	for _, c := range DynamoDBActions(in) {
		got = append(got, c.String())
	}
	want := []string{
		"dynamodb:PutItem on InventoryTable-00000001", "dynamodb:UpdateItem on InventoryTable-00000001",
		"dynamodb:DeleteItem on OrdersTable-00000002", "dynamodb:ConditionCheckItem on LockTable-00000003",
	}
	if !slices.Equal(got, want) {
		t.Errorf("transaction: got %v, want %v", got, want)
	}
	for in, want := range map[any]string{
		&dynamodb.GetItemInput{TableName: s("T")}: "dynamodb:GetItem on T",
		&dynamodb.QueryInput{TableName: s("T")}:   "dynamodb:Query on T",
		&dynamodb.ScanInput{TableName: s("T")}:    "dynamodb:Scan on T",
		&dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{{Get: &types.Get{TableName: s("T")}}}}: "dynamodb:GetItem on T",
		&dynamodb.ListTablesInput{}: "dynamodb:<unmapped *dynamodb.ListTablesInput> on ?",
	} {
		if got := DynamoDBActions(in); len(got) != 1 || got[0].String() != want {
			t.Errorf("%T: got %v, want %s", in, got, want)
		}
	}
}

const doc = `
Resources:
  LockTable:
    Type: AWS::DynamoDB::Table
  FnLogs:
    Type: AWS::Logs::LogGroup
  FnRole:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
              - {Effect: Allow, Action: [dynamodb:GetItem, dynamodb:UpdateItem], Resource: !GetAtt LockTable.Arn}
              - {Effect: Allow, Action: [dynamodb:GetRecords], Resource: !GetAtt LockTable.StreamArn}
              - {Effect: Allow, Action: [logs:PutLogEvents], Resource: !GetAtt FnLogs.Arn}
              - {Effect: Allow, Action: [xray:PutTraceSegments], Resource: "*"}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt FnRole.Arn
      Environment: {Variables: {LOCK_TABLE: !Ref LockTable}}
`

// A new call fails the check until the policy grants it; a granted action no test made is
// a stale permission, unless allowlisted; the event-source, log and X-Ray grants are
// Lambda's, not the code's, and are not compared.
func TestCompare(t *testing.T) {
	tpl, err := template.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	rec.Record("dynamodb:UpdateItem", "LockTable-0123abcd")
	rec.Record("dynamodb:PutItem", "LockTable-0123abcd")
	rec.Record("dynamodb:GetItem", "some-other-table")

	problems, err := Compare(tpl, "Fn", rec, false)
	if err != nil {
		t.Fatal(err)
	}
	wantIn := func(problems []string, subs ...string) {
		t.Helper()
		for _, s := range subs {
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, s) }) {
				t.Errorf("no problem mentions %q: %v", s, problems)
			}
		}
		if len(problems) != len(subs) {
			t.Errorf("got %d problems, want %d: %v", len(problems), len(subs), problems)
		}
	}
	wantIn(problems, "calls dynamodb:PutItem on LockTable, which the role does not grant", `"some-other-table": not a template resource name`)

	problems, err = Compare(tpl, "Fn", rec, true)
	if err != nil {
		t.Fatal(err)
	}
	wantIn(problems, "dynamodb:PutItem on LockTable, which the role does not grant", `"some-other-table"`,
		"grants dynamodb:GetItem on LockTable, which no test exercised")

	saved := Allowlist
	t.Cleanup(func() { Allowlist = saved })
	Allowlist = []Allowance{
		{Function: "Fn", Call: Call{"dynamodb:GetItem", "LockTable"}, Reason: "test"},
		{Function: "Fn", Call: Call{"dynamodb:UpdateItem", "LockTable"}, Reason: "test"},
	}
	problems, _ = Compare(tpl, "Fn", rec, true)
	wantIn(problems, "dynamodb:PutItem on LockTable, which the role does not grant", `"some-other-table"`,
		"dynamodb:UpdateItem on LockTable is in policycheck.Allowlist but the tests exercise it")
}

// A Query or Scan of an index is authorized on the index's ARN, not the table's: granting
// dynamodb:Query on LockTable.Arn does not let the code query LockTable's indexes, so the
// check must not pass it.
func TestIndexCallsAreNotCoveredByTableGrants(t *testing.T) {
	s := aws.String
	for in, want := range map[any]string{
		&dynamodb.QueryInput{TableName: s("LockTable-0123abcd"), IndexName: s("byOwner")}: "dynamodb:Query on LockTable/index/byOwner",
		&dynamodb.ScanInput{TableName: s("LockTable-0123abcd"), IndexName: s("byOwner")}:  "dynamodb:Scan on LockTable/index/byOwner",
		&dynamodb.QueryInput{TableName: s("LockTable-0123abcd")}:                          "dynamodb:Query on LockTable",
	} {
		rec := NewRecorder()
		for _, c := range DynamoDBActions(in) {
			rec.Record(c.Action, c.Resource)
		}
		if got := rec.Calls(); len(got) != 1 || got[0].String() != want {
			t.Errorf("%T: recorded %v, want %s", in, got, want)
		}
	}

	tpl, err := template.Parse([]byte(`
Resources:
  LockTable:
    Type: AWS::DynamoDB::Table
  FnRole:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
              - {Effect: Allow, Action: [dynamodb:Query], Resource: !GetAtt LockTable.Arn}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Role: !GetAtt FnRole.Arn
      Environment: {Variables: {LOCK_TABLE: !Ref LockTable}}
`))
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	for _, c := range DynamoDBActions(&dynamodb.QueryInput{TableName: s("LockTable-0123abcd"), IndexName: s("byOwner")}) {
		rec.Record(c.Action, c.Resource)
	}
	problems, err := Compare(tpl, "Fn", rec, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "calls dynamodb:Query on LockTable/index/byOwner, which the role does not grant") {
		t.Errorf("problems = %v, want the index query reported as not granted", problems)
	}
}

type fakeM struct{ code int }

func (f fakeM) Run() int { return f.code }

func TestRunFailsOnDifferences(t *testing.T) {
	rec := NewRecorder()
	rec.Record("dynamodb:BatchWriteItem", "LockTable-0123abcd")
	var out bytes.Buffer
	c := &checked{m: fakeM{0}, function: "OrderProcessorFunction", rec: rec, out: &out, complete: func() bool { return false }}
	if code := c.Run(); code != 1 {
		t.Errorf("Run = %d, want 1", code)
	}
	if !strings.Contains(out.String(), "dynamodb:BatchWriteItem on LockTable, which the role does not grant") {
		t.Errorf("output:\n%s", out.String())
	}
}

// The recorder sees the requests of the real client (DynamoDB Local), and Fault applies
// a request but loses its answer.
func TestRecorderAndFaultOnTheEngine(t *testing.T) {
	table := testenv.Table(t, "LockTable")
	rec := NewRecorder()
	plain := testenv.Client(t)
	db := rec.Client(plain, Fault(1, func(in any) bool { _, ok := in.(*dynamodb.PutItemInput); return ok }))
	ctx := context.Background()
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "lock"}}
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorFault() != smithy.FaultServer {
		t.Fatalf("PutItem with a fault = %v, want an injected server error", err)
	}
	out, err := plain.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("the faulted PutItem was not applied: %v %v", out, err)
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String(table), Key: key, ConditionExpression: aws.String("attribute_exists(pk)")}},
	}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range rec.Calls() {
		got = append(got, c.String())
	}
	if want := []string{"dynamodb:ConditionCheckItem on LockTable", "dynamodb:PutItem on LockTable"}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v (the plain client's GetItem is not recorded)", got, want)
	}
}
