package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// TestCheckJSONReportsLineAndColumn: a malformed event file's error says where.
func TestCheckJSONReportsLineAndColumn(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`{"a": 1}`, ""},
		{"{\n  \"Records\": [\n    {\"body\": \"x\",}\n  ]\n}", `line 3, column 18: invalid character '}' looking for beginning of object key string`},
		{"{\"a\": 1}\n{\"b\": 2}", "line 2, column 1: invalid character '{' after top-level value"},
		{`{"Records":[`, "line 1, column 12: unexpected end of JSON input"},
		{"{\n\t\"a\": tru\n}", "line 2, column 10: invalid character '\\n' in literal true (expecting 'e')"},
		{"", "line 1, column 1: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		err := checkJSON([]byte(tt.in))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.in, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%q: %v, want %q", tt.in, err, tt.want)
		}
	}
	// Through readEvent, as invoke reports it.
	path := filepath.Join(t.TempDir(), "broken.json")
	_ = os.WriteFile(path, []byte("{\n  \"id\": \"e1\"\n  \"source\": \"x\"\n}\n"), 0o644)
	_, err := readEvent(path)
	if err == nil || !strings.Contains(err.Error(), "broken.json is not valid JSON: line 3, column 3: invalid character '\"' after object key:value pair") {
		t.Errorf("readEvent: %v", err)
	}
}

// TestBuildSaysWhyItIsSlow: a build still running after the notice delay gets one line on
// stderr explaining the wait (the first build compiles the AWS SDK, minutes without output).
func TestBuildSaysWhyItIsSlow(t *testing.T) {
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "bootstrap")
	// A zero delay: the notice is due before the go command has even started.
	if err := build(context.Background(), root, "cmd/invoke/testdata/probefn", out, &stderr, 0); err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "invoke: still building ./cmd/invoke/testdata/probefn: the first build compiles the AWS SDK") {
		t.Errorf("stderr = %q", got)
	}
	stderr.Reset()
	if err := build(context.Background(), root, "cmd/invoke/testdata/probefn", out, &stderr, time.Hour); err != nil || stderr.Len() != 0 {
		t.Errorf("a build within the delay printed %q (%v)", stderr.String(), err)
	}
	err = build(context.Background(), root, "cmd/invoke/testdata/does-not-exist", out, &stderr, time.Hour)
	var exit interface{ ExitCode() int }
	if err == nil || !errors.As(err, &exit) {
		t.Errorf("build of a missing package: %v", err)
	}
}

// TestInvokeMalformedOrdersIsQuiet runs the real order processor on
// events/sqs-order-malformed.json: the malformed messages are returned (batchItemFailures),
// their visibility is shortened through the SQS stand-in, and nothing is logged at WARN —
// one line sums up the visibility changes.
func TestInvokeMalformedOrdersIsQuiet(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	stage := "t" + randomHex(6)
	t.Cleanup(func() { deleteTables(t, tpl, stage) })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	c := config{fn: "OrderProcessorFunction", event: filepath.Join(root, "events", "sqs-order-malformed.json"), stage: stage}
	code, err := invoke(ctx, c, tpl, root, "", &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d (err %v)\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	var resp struct {
		BatchItemFailures []struct{ ItemIdentifier string } `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil || len(resp.BatchItemFailures) != 4 {
		t.Fatalf("response %s (%v), want 4 batch item failures", stdout.String(), err)
	}
	if strings.Contains(stderr.String(), `"level":"WARN"`) {
		t.Errorf("WARN on the normal path of a malformed batch:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "invoke: visibility of 4 returned message(s) set to ") {
		t.Errorf("no summary of the visibility changes:\n%s", stderr.String())
	}
}
