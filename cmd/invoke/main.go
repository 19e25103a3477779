// Command invoke runs one Lambda function of template.yaml locally, without Docker — the
// `sam local invoke` experience on a machine without containers:
//
//	invoke -fn OrderProcessorFunction -event events/sqs-order.json
//	make invoke FN=OrderProcessorFunction EVENT=events/sqs-order.json
//
// It reads the function from template.yaml (Globals applied), resolves its environment for
// a local stand-in of the stack (tables named turnstile-<stage>-..., queue URLs pointing at a
// loopback SQS stand-in that records what the function sends), uses the DynamoDB engine at
// DYNAMODB_ENDPOINT or starts DynamoDB Local, creates the template's tables there when they
// do not exist, builds the function's real bootstrap for this machine, and serves it one
// invocation through a loopback Lambda Runtime API (internal/lambdarun) with the template's
// timeout, memory and log settings.
//
// The function's response is printed on stdout; its logs, the messages it sent and a REPORT
// line go to stderr. The exit status is 0 on success, 1 when the function failed (the error
// document is printed on stdout, as sam local invoke does), 2 when the run could not be set
// up.
//
// Before anything runs, the event is checked against the function's triggers in
// template.yaml (an EventBridge event to the SQS-triggered order processor is refused, and
// an EventBridge event the rule's pattern does not match); -force skips the check.
// -env-vars takes sam local invoke's --env-vars file, -log-level overrides the template's
// log level, and -seed sets stock from a seed file (events/seed-inventory.json) first.
//
// With a fresh engine the tables start empty and vanish afterwards (use -seed); start one
// with `make engine` and export DYNAMODB_ENDPOINT to keep state between invocations.
//
// -tables only creates the tables (and applies -seed) at DYNAMODB_ENDPOINT and exits: the
// set-up step of `sam local invoke` with DynamoDB Local in Docker (docs/local-invoke.md).
//
// The first run prints what it does while it builds: compiling the AWS SDK takes minutes.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/lambdarun"
	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/template"
)

const (
	exitFunctionError = 1
	exitSetup         = 2
	accountID         = "123456789012"
	region            = "us-east-1"
)

type config struct {
	fn, event, stage string
	timeout          time.Duration
	quiet            bool
	force            bool   // invoke even if the event is not of the function's trigger types
	envVars          string // sam local invoke --env-vars file
	logLevel         string // overrides the template's LoggingConfig.ApplicationLogLevel
	seed             string // seed file (events/seed-inventory.json) applied before invoking
	tablesOnly       bool   // create the tables (and apply seed) at DYNAMODB_ENDPOINT, invoke nothing
}

func main() {
	var c config
	flag.StringVar(&c.fn, "fn", "", "logical id of the function in template.yaml (e.g. OrderProcessorFunction)")
	flag.StringVar(&c.event, "event", "", "event file (e.g. events/sqs-order.json); - reads stdin")
	flag.StringVar(&c.stage, "stage", "local", "value of the Stage parameter (names the local tables and queues)")
	flag.DurationVar(&c.timeout, "timeout", 0, "function timeout (default: the template's)")
	flag.BoolVar(&c.quiet, "quiet", false, "do not stream the function's logs to stderr")
	flag.BoolVar(&c.force, "force", false, "invoke even if the event is not one the function's triggers in template.yaml deliver")
	flag.StringVar(&c.envVars, "env-vars", "", `JSON file of environment overrides, as for sam local invoke: {"FunctionLogicalId": {"VAR": "value"}, "Parameters": {...}}`)
	flag.StringVar(&c.logLevel, "log-level", "", "the function's log level: DEBUG, INFO, WARN or ERROR (default: the template's)")
	flag.StringVar(&c.seed, "seed", "", `seed file applied to the tables before invoking, e.g. events/seed-inventory.json ({"inventory": [{"sku": ..., "available": n}]})`)
	flag.BoolVar(&c.tablesOnly, "tables", false, "only create the template's tables (named for -stage) at DYNAMODB_ENDPOINT and apply -seed, then exit: the tables sam local invoke uses (docs/local-invoke.md)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: invoke -fn <LogicalId> -event <file.json> [flags]\n       invoke -tables [-seed <file.json>] [-stage <stage>]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if c.tablesOnly {
		if c.fn != "" || c.event != "" || flag.NArg() > 0 {
			flag.Usage()
			os.Exit(exitSetup)
		}
	} else if c.fn == "" || c.event == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(exitSetup)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, c, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "invoke: %v\n", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, c config, stdout, stderr io.Writer) (int, error) {
	tpl, err := template.LoadDefault()
	if err != nil {
		return exitSetup, err
	}
	if c.tablesOnly {
		return setupTables(ctx, c, tpl, stderr)
	}
	root, err := template.FindRoot()
	if err != nil {
		return exitSetup, err
	}
	return invoke(ctx, c, tpl, root, "", stdout, stderr)
}

// setupTables creates the template's tables, named for c.stage, at DYNAMODB_ENDPOINT unless
// they exist, and applies c.seed: the local stack that functions run by sam local invoke use
// (events/env.docker.json names these tables for stage "local").
func setupTables(ctx context.Context, c config, tpl *template.Template, stderr io.Writer) (int, error) {
	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	if endpoint == "" {
		return exitSetup, errors.New("-tables needs DYNAMODB_ENDPOINT, the engine to create the tables in (one started here would stop, tables and all, when invoke exits)")
	}
	local := stack.Local{Parameters: map[string]string{"Stage": c.stage}, Region: region, AccountID: accountID, StreamArns: map[string]string{}}
	vals, err := local.Values(tpl)
	if err != nil {
		return exitSetup, err
	}
	if err := createTables(ctx, tpl, vals, endpoint, local.StreamArns, stderr); err != nil {
		return exitSetup, err
	}
	if c.seed != "" {
		if err := seed(ctx, c.seed, endpoint, vals, stderr); err != nil {
			return exitSetup, err
		}
	}
	specs, err := tpl.Tables()
	if err != nil {
		return exitSetup, err
	}
	names := make([]string, 0, len(specs))
	for _, spec := range specs {
		names = append(names, vals.Refs[spec.LogicalID])
	}
	fmt.Fprintf(stderr, "invoke: tables ready at %s: %s\n", endpoint, strings.Join(names, ", "))
	return 0, nil
}

// invoke runs function c.fn of tpl; pkg overrides the function's main package (relative to
// root; "" = functions/<name>, see stack.SourceDir).
func invoke(ctx context.Context, c config, tpl *template.Template, root, pkg string, stdout, stderr io.Writer) (int, error) {
	event, err := readEvent(c.event)
	if err != nil {
		return exitSetup, err
	}
	fn, err := stack.LookupFunction(tpl, c.fn)
	if err != nil {
		if _, exists := tpl.Resources[c.fn]; !exists {
			err = fmt.Errorf("%w%s", err, suggestFunction(tpl, c.fn))
		}
		return exitSetup, err
	}
	if !c.force {
		if err := checkEvent(fn, event); err != nil {
			return exitSetup, err
		}
	}
	logLevel := ""
	if c.logLevel != "" {
		switch l := strings.ToUpper(c.logLevel); l {
		case "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL":
			logLevel = l
		default:
			return exitSetup, fmt.Errorf("log level %q: want DEBUG, INFO, WARN or ERROR", c.logLevel)
		}
	}
	if pkg == "" {
		pkg = fn.SourceDir()
	}
	if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
		return exitSetup, fmt.Errorf("%s: the function's main package %s does not exist", c.fn, pkg)
	}

	// Build first: a compile error should not wait for the engine.
	tmp, err := os.MkdirTemp("", "turnstile-invoke-")
	if err != nil {
		return exitSetup, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bootstrap")
	fmt.Fprintf(stderr, "invoke: building %s from ./%s for this machine\n", c.fn, pkg)
	if err := build(ctx, root, pkg, bin, stderr, slowBuildNotice); err != nil {
		return exitSetup, err
	}

	sqs, err := startFakeSQS(accountID, stderr)
	if err != nil {
		return exitSetup, fmt.Errorf("starting the SQS stand-in: %w", err)
	}
	defer sqs.close()

	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	if endpoint == "" {
		fmt.Fprintln(stderr, "invoke: starting DynamoDB Local (the first run fetches it with Maven; set DYNAMODB_ENDPOINT to reuse a running engine)")
		eng, err := ddblocal.Start(ctx, ddblocal.Options{})
		if err != nil {
			return exitSetup, fmt.Errorf("starting DynamoDB Local: %w", err)
		}
		defer eng.Stop()
		endpoint = eng.Endpoint()
	}

	local := stack.Local{
		Parameters:    map[string]string{"Stage": c.stage},
		Region:        region,
		AccountID:     accountID,
		QueueEndpoint: sqs.URL(),
		StreamArns:    map[string]string{},
	}
	vals, err := local.Values(tpl)
	if err != nil {
		return exitSetup, err
	}
	if err := createTables(ctx, tpl, vals, endpoint, local.StreamArns, stderr); err != nil {
		return exitSetup, err
	}
	if vals, err = local.Values(tpl); err != nil { // again, with the real stream ARNs
		return exitSetup, err
	}
	for id, r := range tpl.Resources {
		if r.Type == "AWS::SQS::Queue" {
			sqs.addQueue(vals.Refs[id])
		}
	}

	env, err := fn.ResolveEnvironment(vals)
	if err != nil {
		return exitSetup, err
	}
	if c.envVars != "" {
		set, ignored, err := loadEnvVars(c.envVars, c.fn, env)
		if err != nil {
			return exitSetup, err
		}
		for k, v := range set {
			env[k] = v
		}
		for _, k := range ignored {
			fmt.Fprintf(stderr, "invoke: env-vars: %s ignored: %s declares no such variable (as with sam local invoke)\n", k, c.fn)
		}
	}
	// DYNAMODB_ENDPOINT is invoke's to set: the engine it created the tables in. The template
	// declares it empty (so that sam local invoke --env-vars can set it); an env-vars file's
	// value, such as events/env.docker.json's name on a Docker network, is not used here.
	if v := env[ddblocal.EnvEndpoint]; v != "" && v != endpoint {
		fmt.Fprintf(stderr, "invoke: env-vars: %s=%s ignored: the function uses the engine invoke set up, %s (set DYNAMODB_ENDPOINT in the shell to choose the engine)\n",
			ddblocal.EnvEndpoint, v, endpoint)
	}
	delete(env, ddblocal.EnvEndpoint)
	if c.seed != "" {
		if err := seed(ctx, c.seed, endpoint, vals, stderr); err != nil {
			return exitSetup, err
		}
	}
	opts := lambdarun.Options{
		Binary:       bin,
		Event:        event,
		Timeout:      time.Duration(fn.Timeout()) * time.Second,
		FunctionName: vals.Refs[c.fn],
		MemoryMB:     fn.MemorySize(),
		Region:       region,
		AccountID:    accountID,
		Handler:      fn.String("Handler"),
		LogFormat:    fn.String("LoggingConfig/LogFormat"),
		Env: []string{
			ddblocal.EnvEndpoint + "=" + endpoint,
			"AWS_ENDPOINT_URL_SQS=" + sqs.URL(),
			// Lambda hands every function credentials; these are the local engine's.
			"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_SESSION_TOKEN=",
		},
	}
	if lc, ok := fn.Properties["LoggingConfig"].(map[string]any); ok && lc["ApplicationLogLevel"] != nil {
		if opts.LogLevel, err = vals.Resolve(lc["ApplicationLogLevel"]); err != nil {
			return exitSetup, fmt.Errorf("%s: LoggingConfig.ApplicationLogLevel: %w", c.fn, err)
		}
	}
	if logLevel != "" {
		opts.LogLevel = logLevel
	}
	if c.timeout > 0 {
		opts.Timeout = c.timeout
	}
	for k, v := range env {
		opts.Env = append(opts.Env, k+"="+v)
	}
	if !c.quiet {
		opts.LogOutput = stderr
	}

	res, err := lambdarun.Invoke(ctx, opts)
	if err != nil {
		return exitSetup, err
	}
	if vc := sqs.visibilityChanges(); len(vc) > 0 {
		lo, hi := vc[0].VisibilityTimeout, vc[0].VisibilityTimeout
		for _, c := range vc {
			lo, hi = min(lo, c.VisibilityTimeout), max(hi, c.VisibilityTimeout)
		}
		span := fmt.Sprintf("%d s", lo)
		if hi != lo {
			span = fmt.Sprintf("%d-%d s", lo, hi)
		}
		fmt.Fprintf(stderr, "invoke: visibility of %d returned message(s) set to %s (ChangeMessageVisibility, recorded by the SQS stand-in): SQS would deliver them again then\n", len(vc), span)
	}
	report := fmt.Sprintf("REPORT RequestId: %s Duration: %.2f ms Init Duration: %.2f ms Memory Size: %d MB",
		res.RequestID, ms(res.Duration), ms(res.InitDuration), opts.MemoryMB)
	if n := len(sqs.messages()); n > 0 {
		report += fmt.Sprintf(" Messages Sent: %d", n)
	}
	fmt.Fprintln(stderr, report)
	if res.Error != nil {
		out := res.Error.Raw
		if len(out) == 0 {
			out, _ = json.Marshal(res.Error)
		}
		fmt.Fprintln(stdout, string(bytes.TrimSpace(out)))
		return exitFunctionError, fmt.Errorf("%s failed: %s", c.fn, res.Error)
	}
	fmt.Fprintln(stdout, string(bytes.TrimSpace(res.Payload)))
	return 0, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func readEvent(path string) ([]byte, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the event: %w", err)
	}
	if err := checkJSON(data); err != nil {
		return nil, fmt.Errorf("event %s is not valid JSON: %w", path, err)
	}
	return data, nil
}

// checkJSON returns nil for one valid JSON value, else an error naming the line and column
// (1-based, columns in bytes) where the parser stopped, e.g. "line 7, column 12: invalid
// character '}' looking for beginning of object key string".
func checkJSON(data []byte) error {
	if json.Valid(data) {
		return nil
	}
	var v any
	err := json.Unmarshal(data, &v)
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		line, col := lineCol(data, syn.Offset)
		return fmt.Errorf("line %d, column %d: %v", line, col, syn)
	case err != nil:
		return err
	}
	return errors.New("not one JSON value")
}

// lineCol converts a byte offset of data (json.SyntaxError.Offset: the bytes read before the
// error, so the offending byte is the last of them) into a 1-based line and column.
func lineCol(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset > 0 {
		offset-- // the offending byte itself
	}
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// slowBuildNotice is how long a build runs before invoke says why it takes so long.
const slowBuildNotice = 10 * time.Second

// build compiles the function for this machine (the Lambda build is GOOS=linux GOARCH=arm64;
// here the binary runs on the host), with the same tags as the Makefile's build targets.
// A build still running after notice gets one line on stderr saying why: the first one
// compiles the AWS SDK, which takes minutes, with no other output meanwhile.
func build(ctx context.Context, root, pkg, out string, stderr io.Writer, notice time.Duration) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	done := make(chan struct{})
	noticed := make(chan struct{})
	go func() {
		defer close(noticed)
		select {
		case <-done:
		case <-time.After(notice):
			fmt.Fprintf(stderr, "invoke: still building ./%s: the first build compiles the AWS SDK and takes a few minutes; later builds take seconds\n", pkg)
		}
	}()
	err := cmd.Run()
	close(done)
	<-noticed // stderr is ours again
	if err != nil {
		_, _ = stderr.Write(buf.Bytes())
		return fmt.Errorf("building ./%s: %w", pkg, err)
	}
	return nil
}

// createTables creates every table of the template under its local name unless it exists,
// and records the stream ARNs of tables that have streams.
func createTables(ctx context.Context, tpl *template.Template, vals stack.Values, endpoint string,
	streams map[string]string, stderr io.Writer,
) error {
	client, err := ddblocal.NewClient(ctx, endpoint)
	if err != nil {
		return err
	}
	specs, err := tpl.Tables()
	if err != nil {
		return err
	}
	for _, spec := range specs {
		name := vals.Refs[spec.LogicalID]
		desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		var missing *types.ResourceNotFoundException
		switch {
		case errors.As(err, &missing):
			if err := ddblocal.CreateTable(ctx, client, spec.CreateTableInput(name), spec.TTLInput(name)); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "invoke: created table %s (%s)\n", name, spec.LogicalID)
			if desc, err = client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("describing table %s at %s: %w", name, endpoint, err)
		}
		if arn := aws.ToString(desc.Table.LatestStreamArn); arn != "" {
			streams[spec.LogicalID] = arn
		}
	}
	return nil
}
