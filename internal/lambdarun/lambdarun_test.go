package lambdarun

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// echoBinary builds testdata/echofn (an aws-lambda-go function) once per test run.
func echoBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lambdarun-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "bootstrap")
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", binPath, "./testdata/echofn")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building testdata/echofn: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type reply struct {
	Action      string            `json:"action"`
	Message     string            `json:"message"`
	RequestID   string            `json:"requestId"`
	FunctionARN string            `json:"functionArn"`
	DeadlineMs  int64             `json:"deadlineMs"`
	TraceID     string            `json:"traceId"`
	Env         map[string]string `json:"env"`
	Count       int               `json:"count"`
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestInvoke(t *testing.T) {
	bin := echoBinary(t)
	tests := []struct {
		name      string
		opts      Options
		event     string
		wantErr   string // FunctionError.Type; "" = success
		wantMsg   string // substring of FunctionError.Message
		wantLogs  []string
		checkResp func(t *testing.T, r reply, res Result)
	}{
		{
			name:  "echo with invocation headers",
			opts:  Options{FunctionName: "turnstile-dev-OrderProcessor", Region: "eu-west-1", Timeout: 7 * time.Second},
			event: `{"action":"echo","message":"hi"}`,
			checkResp: func(t *testing.T, r reply, res Result) {
				if r.Message != "hi" || r.RequestID != res.RequestID || !uuidRE.MatchString(r.RequestID) {
					t.Errorf("reply %+v, request id %s", r, res.RequestID)
				}
				if r.FunctionARN != "arn:aws:lambda:eu-west-1:123456789012:function:turnstile-dev-OrderProcessor" {
					t.Errorf("function ARN = %s", r.FunctionARN)
				}
				left := time.Until(time.UnixMilli(r.DeadlineMs))
				if left < 5*time.Second || left > 7*time.Second {
					t.Errorf("deadline %v away, want about 7s", left)
				}
				if !strings.HasPrefix(r.TraceID, "Root=1-") {
					t.Errorf("trace id = %q", r.TraceID)
				}
				if res.InitDuration <= 0 {
					t.Errorf("InitDuration = %v", res.InitDuration)
				}
			},
		},
		{
			name: "environment",
			opts: Options{FunctionName: "fn", MemoryMB: 256, LogFormat: "JSON", LogLevel: "DEBUG",
				Env: []string{"TEST_LOCK_TABLE=turnstile-test-locks", "AWS_REGION=ap-south-1"}},
			event: `{"action":"env"}`,
			checkResp: func(t *testing.T, r reply, _ Result) {
				want := map[string]string{
					"AWS_LAMBDA_FUNCTION_NAME":        "fn",
					"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
					"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
					"AWS_LAMBDA_LOG_FORMAT":           "JSON",
					"AWS_LAMBDA_LOG_LEVEL":            "DEBUG",
					"AWS_REGION":                      "ap-south-1", // caller's variables win
					"AWS_XRAY_SDK_DISABLED":           "true",
					"_HANDLER":                        "bootstrap",
					"TEST_LOCK_TABLE":                 "turnstile-test-locks",
				}
				for k, v := range want {
					if r.Env[k] != v {
						t.Errorf("%s = %q, want %q", k, r.Env[k], v)
					}
				}
				if !strings.HasPrefix(r.Env["AWS_LAMBDA_RUNTIME_API"], "127.0.0.1:") {
					t.Errorf("AWS_LAMBDA_RUNTIME_API = %q", r.Env["AWS_LAMBDA_RUNTIME_API"])
				}
			},
		},
		{
			name:     "logs from stdout and stderr",
			event:    `{"action":"log"}`,
			wantLogs: []string{"stdout line for ", "stderr line for "},
		},
		{
			name:    "function error",
			event:   `{"action":"error","message":"out of stock"}`,
			wantErr: "errorString",
			wantMsg: "order ord-1001: out of stock",
		},
		{
			name:    "panic",
			event:   `{"action":"panic"}`,
			wantErr: "string",
			wantMsg: "boom",
		},
		{
			name:    "timeout",
			opts:    Options{Timeout: 300 * time.Millisecond},
			event:   `{"action":"sleep"}`,
			wantErr: ErrorTypeTimeout,
			wantMsg: "Task timed out after 0.30 seconds",
		},
		{
			name:    "process exits",
			event:   `{"action":"exit"}`,
			wantErr: ErrorTypeExit,
			wantMsg: "exit status 3",
		},
		{
			name:    "init error",
			opts:    Options{Env: []string{"TEST_INIT_ERROR=1"}},
			event:   `{"action":"echo"}`,
			wantErr: "Runtime.ConfigError",
			wantMsg: "LOCK_TABLE is not set",
		},
		{
			name:    "init timeout",
			opts:    Options{Env: []string{"TEST_SLOW_INIT=1"}, InitTimeout: 300 * time.Millisecond},
			event:   `{"action":"echo"}`,
			wantErr: ErrorTypeInitError,
			wantMsg: "init did not finish",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Binary = bin
			opts.Event = []byte(tt.event)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := Invoke(ctx, opts)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if tt.wantErr == "" {
				if res.Error != nil {
					t.Fatalf("function error %v\nlogs:\n%s", res.Error, res.Logs)
				}
				var r reply
				if err := json.Unmarshal(res.Payload, &r); err != nil {
					t.Fatalf("payload %q: %v", res.Payload, err)
				}
				if tt.checkResp != nil {
					tt.checkResp(t, r, res)
				}
			} else {
				if res.Error == nil {
					t.Fatalf("no error; payload %s", res.Payload)
				}
				if res.Error.Type != tt.wantErr || !strings.Contains(res.Error.Message, tt.wantMsg) {
					t.Errorf("error = %q / %q, want type %q containing %q", res.Error.Type, res.Error.Message, tt.wantErr, tt.wantMsg)
				}
				if len(res.Error.Raw) == 0 {
					t.Error("FunctionError.Raw is empty")
				}
				if res.Payload != nil {
					t.Errorf("payload %q alongside an error", res.Payload)
				}
			}
			for _, want := range tt.wantLogs {
				if !bytes.Contains(res.Logs, []byte(want+res.RequestID)) {
					t.Errorf("logs lack %q:\n%s", want+res.RequestID, res.Logs)
				}
			}
		})
	}
}

func TestSessionServesWarmInvocations(t *testing.T) {
	var live bytes.Buffer
	var liveMu sync.Mutex
	s, err := Start(context.Background(), Options{Binary: echoBinary(t), LogOutput: writerFunc(func(p []byte) (int, error) {
		liveMu.Lock()
		defer liveMu.Unlock()
		return live.Write(p)
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := map[string]bool{}
	for i := 1; i <= 3; i++ {
		res, err := s.Invoke(context.Background(), []byte(`{"action":"log"}`))
		if err != nil || res.Error != nil {
			t.Fatalf("invoke %d: %v %v", i, err, res.Error)
		}
		var r reply
		if err := json.Unmarshal(res.Payload, &r); err != nil {
			t.Fatal(err)
		}
		if r.Count != i {
			t.Errorf("invoke %d ran in a cold process (count %d)", i, r.Count)
		}
		if (i == 1) != (res.InitDuration > 0) {
			t.Errorf("invoke %d: InitDuration = %v", i, res.InitDuration)
		}
		if ids[res.RequestID] {
			t.Errorf("request id %s reused", res.RequestID)
		}
		ids[res.RequestID] = true
		// Each result holds its own invocation's log lines, not the others'.
		if !bytes.Contains(res.Logs, []byte("stdout line for "+res.RequestID)) {
			t.Errorf("invoke %d logs lack its lines:\n%s", i, res.Logs)
		}
		if n := bytes.Count(res.Logs, []byte("stdout line for ")); n != 1 {
			t.Errorf("invoke %d logs hold %d invocations' lines:\n%s", i, n, res.Logs)
		}
	}
	// An error does not end the session.
	res, err := s.Invoke(context.Background(), []byte(`{"action":"error","message":"x"}`))
	if err != nil || res.Error == nil {
		t.Fatalf("error invocation: %v %+v", err, res)
	}
	res, err = s.Invoke(context.Background(), []byte(`{"action":"echo"}`))
	if err != nil || res.Error != nil {
		t.Fatalf("invocation after an error: %v %v", err, res.Error)
	}
	liveMu.Lock()
	n := bytes.Count(live.Bytes(), []byte("stderr line for "))
	liveMu.Unlock()
	if n != 3 {
		t.Errorf("live log output holds %d of 3 stderr lines", n)
	}

	// After a timeout the sandbox is gone.
	s2, err := Start(context.Background(), Options{Binary: echoBinary(t), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if res, _ := s2.Invoke(context.Background(), []byte(`{"action":"sleep"}`)); res.Error == nil || res.Error.Type != ErrorTypeTimeout {
		t.Fatalf("want a timeout, got %+v", res)
	}
	if _, err := s2.Invoke(context.Background(), []byte(`{"action":"echo"}`)); err == nil {
		t.Error("a timed-out session accepted another invocation")
	}
}

func TestRuntimeAPIRejectsUnknownRequestID(t *testing.T) {
	s, err := Start(context.Background(), Options{Binary: echoBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, path := range []string{"invocation/not-a-request/response", "invocation/not-a-request/error"} {
		resp, err := http.Post("http://"+s.RuntimeAPI()+apiPrefix+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s = %d, want 400", path, resp.StatusCode)
		}
	}
}

func TestStartRejectsMissingBinary(t *testing.T) {
	tests := []struct {
		name string
		bin  string
	}{
		{"empty", ""},
		{"missing", filepath.Join(t.TempDir(), "bootstrap")},
		{"directory", t.TempDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Start(context.Background(), Options{Binary: tt.bin}); err == nil {
				t.Error("Start succeeded")
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
