package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestInvokeEndToEnd runs a probe function as JanitorFunction of the real template: built
// for the host, served through the Runtime API emulation, with the template's environment
// resolved for the local stack, writing to the engine and sending to the SQS stand-in.
func TestInvokeEndToEnd(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	stage := "t" + randomHex(6)
	t.Cleanup(func() { deleteTables(t, tpl, stage) })
	eventFile := filepath.Join(t.TempDir(), "event.json")

	tests := []struct {
		name     string
		event    string
		logLevel string
		wantCode int
		check    func(t *testing.T, stdout, stderr string)
	}{
		{
			name:     "log level",
			event:    `{"orderId":"ord-1002"}`,
			logLevel: "warn",
			check: func(t *testing.T, stdout, stderr string) {
				var r struct {
					Env map[string]string `json:"env"`
				}
				if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Env["AWS_LAMBDA_LOG_LEVEL"] != "WARN" {
					t.Errorf("AWS_LAMBDA_LOG_LEVEL = %q (%v), want WARN", r.Env["AWS_LAMBDA_LOG_LEVEL"], err)
				}
			},
		},
		{
			name:  "success",
			event: `{"orderId":"ord-1001"}`,
			check: func(t *testing.T, stdout, stderr string) {
				var r struct {
					Env       map[string]string `json:"env"`
					Wrote     string            `json:"wrote"`
					MessageID string            `json:"messageId"`
				}
				if err := json.Unmarshal([]byte(stdout), &r); err != nil {
					t.Fatalf("stdout is not the handler's JSON response: %v\n%s", err, stdout)
				}
				want := map[string]string{
					"LOCK_TABLE":                      "turnstile-" + stage + "-locks",
					"ORDERS_TABLE":                    "turnstile-" + stage + "-orders",
					"STAGE":                           stage,
					"SWEEP_MIN_AGE_SECONDS":           "3600",
					"AWS_LAMBDA_LOG_FORMAT":           "JSON",
					"AWS_LAMBDA_LOG_LEVEL":            "INFO",
					"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
					// The template declares it empty; invoke sets its engine's.
					"DYNAMODB_ENDPOINT": testenv.Endpoint(),
				}
				for k, v := range want {
					if r.Env[k] != v {
						t.Errorf("%s = %q, want %q", k, r.Env[k], v)
					}
				}
				if !strings.HasSuffix(r.Env["ORDERS_QUEUE_URL"], "/123456789012/turnstile-"+stage+"-orders") {
					t.Errorf("ORDERS_QUEUE_URL = %q", r.Env["ORDERS_QUEUE_URL"])
				}
				if r.Wrote != want["LOCK_TABLE"] || r.MessageID == "" {
					t.Errorf("response %+v", r)
				}
				for _, s := range []string{`"message":"probe done"`, `"requestId":"`, "message sent to turnstile-" + stage + "-orders: " + `{"orderId":"ord-1001"}`,
					`"_aws":{`, "REPORT RequestId: ", "Messages Sent: 1"} {
					if !strings.Contains(stderr, s) {
						t.Errorf("stderr lacks %q:\n%s", s, stderr)
					}
				}
			},
		},
		{
			name:     "function error",
			event:    `{"fail":"out of stock"}`,
			wantCode: exitFunctionError,
			check: func(t *testing.T, stdout, stderr string) {
				var e struct {
					Type    string `json:"errorType"`
					Message string `json:"errorMessage"`
				}
				if err := json.Unmarshal([]byte(stdout), &e); err != nil || e.Message != "out of stock" {
					t.Errorf("stdout = %q (%v), want the error document", stdout, err)
				}
				if !strings.Contains(stderr, `"message":"failing on request"`) {
					t.Errorf("stderr lacks the function's log:\n%s", stderr)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(eventFile, []byte(tt.event), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			// The probe is not the janitor: its events are not of the janitor's triggers.
			c := config{fn: "JanitorFunction", event: eventFile, stage: stage, force: true, logLevel: tt.logLevel}
			code, err := invoke(ctx, c, tpl, root, "cmd/invoke/testdata/probefn", &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d (err %v), want %d\nstdout:\n%s\nstderr:\n%s", code, err, tt.wantCode, stdout.String(), stderr.String())
			}
			tt.check(t, strings.TrimSpace(stdout.String()), stderr.String())
		})
	}
}

func TestInvokeSetupErrors(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "e.json")
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(good, []byte(`{}`), 0o644)
	_ = os.WriteFile(bad, []byte(`{"Records":[`), 0o644)
	tests := []struct {
		name, fn, event, pkg, want string
	}{
		{"unknown function", "NopeFunction", good, "", "no such resource"},
		{"not a function", "LockTable", good, "", "resource type"},
		{"missing event", "JanitorFunction", filepath.Join(t.TempDir(), "none.json"), "", "reading the event"},
		{"invalid event", "JanitorFunction", bad, "", "not valid JSON: line 1, column 12: unexpected end of JSON input"},
		{"missing package", "JanitorFunction", good, "functions/does-not-exist", "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code, err := invoke(context.Background(), config{fn: tt.fn, event: tt.event, stage: "x", force: true}, tpl, root, tt.pkg, &out, &errOut)
			if code != exitSetup || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("code %d, err %v; want %d and an error containing %q", code, err, exitSetup, tt.want)
			}
		})
	}
}

func TestFakeSQSSpeaksTheSDKProtocol(t *testing.T) {
	var report bytes.Buffer
	f, err := startFakeSQS("123456789012", &report)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	url := f.URL() + "/123456789012/turnstile-x-orders"
	f.addQueue(url)
	client := sqs.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(f.URL()),
	})
	ctx := context.Background()
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(`{"orderId":"ord-1"}`)}); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	bo, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("one")}, {Id: aws.String("b"), MessageBody: aws.String("two")},
	}})
	if err != nil || len(bo.Successful) != 2 {
		t.Fatalf("SendMessageBatch: %v %+v", err, bo)
	}
	gu, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("turnstile-x-orders")})
	if err != nil || aws.ToString(gu.QueueUrl) != url {
		t.Fatalf("GetQueueUrl: %v %v", err, gu)
	}
	other := f.URL() + "/123456789012/unknown"
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &other, MessageBody: aws.String("x")}); err == nil || !strings.Contains(err.Error(), "QueueDoesNotExist") {
		t.Errorf("send to an unknown queue: %v", err)
	}
	if _, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: aws.String("rh-1"), VisibilityTimeout: 2}); err != nil {
		t.Errorf("ChangeMessageVisibility: %v", err)
	}
	if vc := f.visibilityChanges(); len(vc) != 1 || vc[0].ReceiptHandle != "rh-1" || vc[0].VisibilityTimeout != 2 {
		t.Errorf("visibility changes = %+v", vc)
	}
	msgs := f.messages()
	if len(msgs) != 3 || msgs[0].Body != `{"orderId":"ord-1"}` || msgs[2].Body != "two" {
		t.Errorf("recorded %+v", msgs)
	}
	if !strings.Contains(report.String(), "message sent to turnstile-x-orders: two") {
		t.Errorf("report = %q", report.String())
	}
}

func deleteTables(t *testing.T, tpl *template.Template, stage string) {
	client := testenv.Client(t)
	vals, err := stack.Local{Parameters: map[string]string{"Stage": stage}}.Values(tpl)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := tpl.Tables()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		name := vals.Refs[s.LogicalID]
		_, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		var nf *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &nf) {
			t.Logf("deleting %s: %v", name, err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestInvokeRefusesEventOfAnotherTrigger: the event file is checked against the function's
// triggers in template.yaml before anything is built or started; -force skips the check.
func TestInvokeRefusesEventOfAnotherTrigger(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	ev := func(name string) string { return filepath.Join(root, "events", name) }
	other := filepath.Join(t.TempDir(), "other-rule.json")
	_ = os.WriteFile(other, []byte(`{"id":"e","detail-type":"StockCounted","source":"x","detail":{}}`), 0o644)
	tests := []struct {
		fn, event, want string
	}{
		{"OrderProcessorFunction", ev("eventbridge-stock-adjusted.json"), `OrderProcessorFunction is triggered by Orders (SQS); the event is an EventBridge event (detail-type "StockAdjusted"`},
		{"OrderProcessorFunction", ev("dynamodb-ttl-remove.json"), "the event is a DynamoDB stream batch of 1 record"},
		{"InventoryUpdaterFunction", ev("sqs-order.json"), "InventoryUpdaterFunction is triggered by StockAdjusted (EventBridgeRule); the event is an SQS batch"},
		{"InventoryUpdaterFunction", other, `the event is an EventBridge event (detail-type "StockCounted"`},
		{"JanitorFunction", ev("sqs-order.json"), "JanitorFunction is triggered by LockTableTTLDeletions (DynamoDB), Sweep (Schedule); the event is an SQS batch"},
		{"JanitorFunction", ev("eventbridge-stock-adjusted.json"), "none of them delivers (check EVENT, or FORCE=1 / -force"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code, err := invoke(context.Background(), config{fn: tt.fn, event: tt.event, stage: "x"}, tpl, root, "", &out, &errOut)
		if code != exitSetup || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: code %d, err %v; want a refusal containing %q", tt.fn, filepath.Base(tt.event), code, err, tt.want)
		}
	}
	// Every event file of the repository passes for the function it was made for, and every
	// file of events/ is either such an event or one of the other inputs of a local
	// invocation: a new event file must say which function it is for here.
	forFunction := map[string][]string{
		"OrderProcessorFunction":   {"sqs-order.json", "sqs-order-batch.json", "sqs-order-duplicate.json", "sqs-order-malformed.json"},
		"InventoryUpdaterFunction": {"eventbridge-stock-adjusted.json", "eventbridge-stock-adjusted-malformed.json"},
		"JanitorFunction":          {"dynamodb-ttl-remove.json", "dynamodb-user-remove.json", "scheduled-sweep.json"},
	}
	notEvents := map[string]string{
		"seed-inventory.json": "SEED / -seed / -tables -seed",
		"env.docker.json":     "sam local invoke --env-vars (TestDockerEnvVarsFile)",
	}
	listed := map[string]bool{}
	for fn, files := range forFunction {
		f, err := stack.LookupFunction(tpl, fn)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			listed[name] = true
			b, err := os.ReadFile(ev(name))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkEvent(f, b); err != nil {
				t.Errorf("%s %s: %v", fn, name, err)
			}
		}
	}
	all, err := filepath.Glob(ev("*.json"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no event files: %v", err)
	}
	for _, file := range all {
		name := filepath.Base(file)
		if !listed[name] && notEvents[name] == "" {
			t.Errorf("events/%s: not listed for any function (add it to forFunction, or to notEvents if it is no event)", name)
		}
		if err := checkJSON(mustRead(t, file)); err != nil {
			t.Errorf("events/%s: %v", name, err)
		}
	}
	for name := range notEvents {
		if _, err := os.Stat(ev(name)); err != nil {
			t.Errorf("notEvents lists %s: %v", name, err)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSuggestFunction(t *testing.T) {
	tpl := testenv.Template(t)
	for name, want := range map[string]string{
		"OrderProcesorFunction": "did you mean OrderProcessorFunction?",
		"orderprocessor":        "did you mean OrderProcessorFunction?",
		"Janitor":               "did you mean JanitorFunction?",
		"InventoryUpdater":      "did you mean InventoryUpdaterFunction?",
		"Zebra":                 "(functions: InventoryUpdaterFunction, JanitorFunction, OrderProcessorFunction)",
	} {
		var out, errOut bytes.Buffer
		_, err := invoke(context.Background(), config{fn: name, event: filepath.Join("..", "..", "events", "sqs-order.json"), stage: "x"}, tpl, ".", "", &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", name, err, want)
		}
	}
}

func TestLoadEnvVars(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env.json")
	_ = os.WriteFile(path, []byte(`{"Parameters":{"STAGE":"p","OTHER":"x"},"JanitorFunction":{"SWEEP_MIN_AGE_SECONDS":60,"STAGE":"j","NOPE":"n"},"OrderProcessorFunction":{"STAGE":"o"}}`), 0o644)
	set, ignored, err := loadEnvVars(path, "JanitorFunction", map[string]string{"STAGE": "local", "SWEEP_MIN_AGE_SECONDS": "3600"})
	if err != nil {
		t.Fatal(err)
	}
	if set["STAGE"] != "j" || set["SWEEP_MIN_AGE_SECONDS"] != "60" || len(set) != 2 {
		t.Errorf("set = %v", set)
	}
	if strings.Join(ignored, ",") != "Parameters.OTHER,JanitorFunction.NOPE" {
		t.Errorf("ignored = %v", ignored)
	}
	_ = os.WriteFile(path, []byte(`{"JanitorFunction":{"STAGE":{"x":1}}}`), 0o644)
	if _, _, err := loadEnvVars(path, "JanitorFunction", map[string]string{"STAGE": ""}); err == nil || !strings.Contains(err.Error(), "JanitorFunction.STAGE: must be a string") {
		t.Errorf("bad value: %v", err)
	}
}

// TestInvokeSeedEnvVarsAndLogLevel runs the real order processor on events/sqs-order.json
// after seeding events/seed-inventory.json: the order is RESERVED (without the seed it is
// REJECTED for lack of stock). ENV_VARS overrides declared variables only; the response is
// followed by a newline. (LOG_LEVEL: TestInvokeEndToEnd/log_level.)
func TestInvokeSeedEnvVarsAndLogLevel(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	stage := "t" + randomHex(6)
	t.Cleanup(func() { deleteTables(t, tpl, stage) })
	envFile := filepath.Join(t.TempDir(), "env.json")
	_ = os.WriteFile(envFile, []byte(`{"OrderProcessorFunction":{"INVENTORY_TABLE":"turnstile-`+stage+`-inventory","UNDECLARED":"x","DYNAMODB_ENDPOINT":"http://dynamodb-local:8000"}}`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	c := config{fn: "OrderProcessorFunction", event: filepath.Join(root, "events", "sqs-order.json"), stage: stage,
		seed: filepath.Join(root, "events", "seed-inventory.json"), envVars: envFile}
	code, err := invoke(ctx, c, tpl, root, "", &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d (err %v)\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	if got := stdout.String(); got != `{"batchItemFailures":[]}`+"\n" {
		t.Errorf("stdout = %q, want the response and a trailing newline", got)
	}
	for _, s := range []string{"invoke: seeded MUG-RED-350: 40 available", `"status":"RESERVED"`,
		"env-vars: OrderProcessorFunction.UNDECLARED ignored",
		"env-vars: DYNAMODB_ENDPOINT=http://dynamodb-local:8000 ignored: the function uses the engine invoke set up, " + testenv.Endpoint(),
		"invoke: building OrderProcessorFunction from ./functions/orderprocessor"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
		}
	}
}
