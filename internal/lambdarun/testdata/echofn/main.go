// Command echofn is a test-only Lambda function for the lambdarun tests: the event's
// "action" selects a behaviour.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type event struct {
	Action  string `json:"action"`
	Message string `json:"message"`
}

type reply struct {
	Action      string            `json:"action"`
	Message     string            `json:"message,omitempty"`
	RequestID   string            `json:"requestId"`
	FunctionARN string            `json:"functionArn"`
	DeadlineMs  int64             `json:"deadlineMs"`
	TraceID     string            `json:"traceId"`
	Env         map[string]string `json:"env,omitempty"`
	Count       int               `json:"count"`
}

var count int

func handle(ctx context.Context, ev event) (reply, error) {
	count++
	lc, _ := lambdacontext.FromContext(ctx)
	dl, _ := ctx.Deadline()
	trace, _ := ctx.Value("x-amzn-trace-id").(string)
	r := reply{Action: ev.Action, Message: ev.Message, RequestID: lc.AwsRequestID, FunctionARN: lc.InvokedFunctionArn,
		DeadlineMs: dl.UnixMilli(), TraceID: trace, Count: count}
	switch ev.Action {
	case "echo":
		return r, nil
	case "log":
		fmt.Fprintf(os.Stdout, "stdout line for %s\n", lc.AwsRequestID)
		fmt.Fprintf(os.Stderr, "stderr line for %s\n", lc.AwsRequestID)
		return r, nil
	case "env":
		r.Env = map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "_") || strings.HasPrefix(k, "TEST_") {
				r.Env[k] = v
			}
		}
		return r, nil
	case "error":
		return r, errors.New("order ord-1001: " + ev.Message)
	case "panic":
		panic("boom")
	case "sleep":
		<-time.After(time.Hour)
		return r, nil
	case "exit":
		os.Exit(3)
	}
	return r, fmt.Errorf("unknown action %q", ev.Action)
}

func main() {
	if os.Getenv("TEST_INIT_ERROR") != "" {
		// Report an init failure the way a runtime does, then exit.
		url := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/init/error"
		req, _ := http.NewRequest(http.MethodPost, url,
			strings.NewReader(`{"errorType":"Runtime.ConfigError","errorMessage":"LOCK_TABLE is not set"}`))
		req.Header.Set("Lambda-Runtime-Function-Error-Type", "Runtime.ConfigError")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		os.Exit(1)
	}
	if os.Getenv("TEST_SLOW_INIT") != "" {
		time.Sleep(time.Hour)
	}
	lambda.Start(handle)
}
