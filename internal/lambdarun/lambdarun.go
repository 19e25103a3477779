// Package lambdarun runs a Lambda function's real bootstrap binary locally, without Docker,
// behind a loopback emulation of the Lambda Runtime API
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html):
//
//	GET  /2018-06-01/runtime/invocation/next
//	POST /2018-06-01/runtime/invocation/{id}/response
//	POST /2018-06-01/runtime/invocation/{id}/error
//	POST /2018-06-01/runtime/init/error
//
// The process gets AWS_LAMBDA_RUNTIME_API=127.0.0.1:<port> and the environment Lambda gives a
// function (function name, memory, region, log format, _HANDLER, ...) plus the caller's
// variables. Invocations carry the Lambda-Runtime-* headers (request id, deadline, invoked
// function ARN, trace id); the function timeout is enforced like Lambda does, by stopping the
// process. Stdout and stderr are captured together, as CloudWatch Logs would receive them.
//
// Invoke runs one invocation in a fresh process; Start returns a Session that serves several
// invocations to one warm process.
package lambdarun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults applied by Start for zero Options fields (Lambda's own defaults where it has one).
const (
	DefaultTimeout      = 3 * time.Second
	DefaultInitTimeout  = 10 * time.Second
	DefaultMemoryMB     = 128
	DefaultRegion       = "us-east-1"
	DefaultAccountID    = "123456789012"
	DefaultFunctionName = "function"
	DefaultHandler      = "bootstrap"
)

// Error types reported in FunctionError.Type for failures the runtime, not the function,
// detects. Lambda uses the same names.
const (
	ErrorTypeTimeout   = "Sandbox.Timedout"
	ErrorTypeExit      = "Runtime.ExitError"
	ErrorTypeInitError = "Runtime.InitError"
)

const apiPrefix = "/2018-06-01/runtime/"

// Options describe the function to run.
type Options struct {
	// Binary is the path of the function's executable (its bootstrap). Required.
	Binary string
	// Args are extra command-line arguments (none in Lambda).
	Args []string
	// Env holds the function's environment variables ("KEY=value"), e.g. those of its
	// template Environment plus DYNAMODB_ENDPOINT. They override the runtime's defaults.
	Env []string
	// Event is the invocation payload used by Invoke.
	Event []byte
	// Timeout is the function timeout (default 3 s): an invocation that has not answered
	// by then fails with Sandbox.Timedout and the process is stopped.
	Timeout time.Duration
	// InitTimeout bounds the time from start until the runtime first asks for an
	// invocation (default 10 s, Lambda's init limit).
	InitTimeout time.Duration
	// FunctionName, MemoryMB, Region, AccountID and Handler fill AWS_LAMBDA_FUNCTION_NAME,
	// AWS_LAMBDA_FUNCTION_MEMORY_SIZE, AWS_REGION, the invoked function ARN and _HANDLER.
	FunctionName string
	MemoryMB     int
	Region       string
	AccountID    string
	Handler      string
	// LogFormat ("JSON" or "Text") and LogLevel (e.g. "INFO") become AWS_LAMBDA_LOG_FORMAT
	// and AWS_LAMBDA_LOG_LEVEL, as a function's LoggingConfig does; empty leaves them unset.
	LogFormat string
	LogLevel  string
	// Dir is the working directory of the process (default: the binary's directory, as
	// /var/task is in Lambda).
	Dir string
	// LogOutput, if set, receives a live copy of everything the process writes.
	LogOutput io.Writer
}

// Result is the outcome of one invocation.
type Result struct {
	// RequestID is the invocation's Lambda-Runtime-Aws-Request-Id.
	RequestID string
	// Payload is the function's response body; nil when Error is set.
	Payload []byte
	// Error is set when the function reported an error, crashed, or timed out.
	Error *FunctionError
	// Logs is what the process wrote (stdout and stderr interleaved) during the invocation;
	// for Invoke, everything it wrote from start to exit.
	Logs []byte
	// Duration is the time from handing the event to the runtime until its answer.
	Duration time.Duration
	// InitDuration is the time from process start until the runtime first asked for an
	// invocation; zero for warm invocations.
	InitDuration time.Duration
}

// FunctionError is an error reported through the Runtime API, or one the emulation
// detected (timeout, exit).
type FunctionError struct {
	Type       string          `json:"errorType"`
	Message    string          `json:"errorMessage"`
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
	// Raw is the error document as the runtime posted it (or as the emulation built it).
	Raw []byte `json:"-"`
}

// Error implements error.
func (e *FunctionError) Error() string {
	if e.Type == "" {
		return e.Message
	}
	return e.Type + ": " + e.Message
}

// Invoke starts the function, runs one invocation of opts.Event, stops the process and
// returns the result with the complete process output. The error is non-nil only when the
// emulation itself fails (binary missing, context cancelled); errors of the function are in
// Result.Error.
func Invoke(ctx context.Context, opts Options) (Result, error) {
	s, err := Start(ctx, opts)
	if err != nil {
		return Result{}, err
	}
	res, err := s.Invoke(ctx, opts.Event)
	_ = s.Close()
	res.Logs = s.logs.bytes() // everything, now that the process has exited
	return res, err
}

// Session is a running function process that serves invocations one at a time.
type Session struct {
	opts      Options
	ln        net.Listener
	srv       *http.Server
	cmd       *exec.Cmd
	logs      *logBuffer
	started   time.Time
	exited    chan struct{} // closed when the process has exited
	exitErr   error         // the process's exit status, valid after exited
	invokes   chan *invocation
	nextCalls chan struct{} // one token per GET /next
	closing   chan struct{}
	closeOnce sync.Once
	invokeMu  sync.Mutex // one invocation at a time

	mu          sync.Mutex
	current     *invocation
	initErr     *FunctionError
	firstNext   time.Time // when the runtime first asked for an invocation (end of init)
	invocations int
	dead        error // why the session cannot serve more invocations
}

type invocation struct {
	id       string
	event    []byte
	deadline time.Time
	taken    chan struct{}  // closed when the runtime received the event
	done     chan *response // receives the runtime's answer
}

type response struct {
	payload []byte
	err     *FunctionError
}

// Start launches the function process behind a fresh Runtime API endpoint on 127.0.0.1.
func Start(ctx context.Context, opts Options) (*Session, error) {
	if opts.Binary == "" {
		return nil, errors.New("lambdarun: Options.Binary is empty")
	}
	bin, err := filepath.Abs(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("lambdarun: %w", err)
	}
	if st, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("lambdarun: function binary: %w", err)
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("lambdarun: function binary %s is not an executable file", bin)
	}
	opts.Binary = bin
	applyDefaults(&opts)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lambdarun: listening for the runtime API: %w", err)
	}
	s := &Session{
		opts:      opts,
		ln:        ln,
		logs:      &logBuffer{live: opts.LogOutput},
		exited:    make(chan struct{}),
		invokes:   make(chan *invocation),
		nextCalls: make(chan struct{}, 1),
		closing:   make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+apiPrefix+"invocation/next", s.handleNext)
	mux.HandleFunc("POST "+apiPrefix+"invocation/{id}/response", s.handleResponse)
	mux.HandleFunc("POST "+apiPrefix+"invocation/{id}/error", s.handleError)
	mux.HandleFunc("POST "+apiPrefix+"init/error", s.handleInitError)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()

	cmd := exec.Command(opts.Binary, opts.Args...)
	cmd.Dir = opts.Dir
	cmd.Env = s.environment()
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	cmd.WaitDelay = 2 * time.Second
	s.cmd = cmd
	s.started = time.Now()
	if err := cmd.Start(); err != nil {
		_ = s.srv.Close()
		return nil, fmt.Errorf("lambdarun: starting %s: %w", opts.Binary, err)
	}
	go func() {
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := ctx.Err(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func applyDefaults(o *Options) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = DefaultInitTimeout
	}
	if o.MemoryMB <= 0 {
		o.MemoryMB = DefaultMemoryMB
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.AccountID == "" {
		o.AccountID = DefaultAccountID
	}
	if o.FunctionName == "" {
		o.FunctionName = DefaultFunctionName
	}
	if o.Handler == "" {
		o.Handler = DefaultHandler
	}
	if o.Dir == "" {
		o.Dir = filepath.Dir(o.Binary)
	}
}

// FunctionARN is the ARN the runtime sees as the invoked function.
func (s *Session) FunctionARN() string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", s.opts.Region, s.opts.AccountID, s.opts.FunctionName)
}

// RuntimeAPI is the host:port of the emulated Runtime API.
func (s *Session) RuntimeAPI() string { return s.ln.Addr().String() }

// environment builds the process environment: a few host variables (PATH, HOME, TMPDIR),
// what Lambda sets for a function, then the caller's variables, which win.
func (s *Session) environment() []string {
	o := s.opts
	env := map[string]string{
		"AWS_LAMBDA_RUNTIME_API":          s.RuntimeAPI(),
		"AWS_LAMBDA_FUNCTION_NAME":        o.FunctionName,
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(o.MemoryMB),
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + o.FunctionName,
		"AWS_LAMBDA_LOG_STREAM_NAME":      time.Now().UTC().Format("2006/01/02") + "/[$LATEST]" + randomHex(16),
		"AWS_LAMBDA_INITIALIZATION_TYPE":  "on-demand",
		"AWS_REGION":                      o.Region,
		"AWS_DEFAULT_REGION":              o.Region,
		"_HANDLER":                        o.Handler,
		"TZ":                              ":UTC",
		"LANG":                            "en_US.UTF-8",
		// No X-Ray daemon here: keep the SDK quiet.
		"AWS_XRAY_SDK_DISABLED":    "true",
		"AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
	}
	if o.LogFormat != "" {
		env["AWS_LAMBDA_LOG_FORMAT"] = o.LogFormat
	}
	if o.LogLevel != "" {
		env["AWS_LAMBDA_LOG_LEVEL"] = o.LogLevel
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for _, kv := range o.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// Invoke hands event to the runtime and waits for its answer, the function timeout, or the
// process's exit. After a timeout or an exit the session cannot serve further invocations.
// Logs holds what the process wrote until it asked for the next invocation. Calls are
// serialized: like a Lambda sandbox, a session runs one invocation at a time.
func (s *Session) Invoke(ctx context.Context, event []byte) (Result, error) {
	s.invokeMu.Lock()
	defer s.invokeMu.Unlock()
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead != nil {
		return Result{}, fmt.Errorf("lambdarun: session cannot invoke: %w", dead)
	}
	if event == nil {
		event = []byte("{}")
	}
	inv := &invocation{
		id:    newRequestID(),
		event: event,
		taken: make(chan struct{}),
		done:  make(chan *response, 1),
	}
	res := Result{RequestID: inv.id}
	logStart := s.logs.len()

	// Hand the event over: wait for the runtime's GET /next (during init, up to InitTimeout).
	var handoff <-chan time.Time
	s.mu.Lock()
	firstInvoke := s.invocations == 0
	s.invocations++
	initDone := !s.firstNext.IsZero()
	s.mu.Unlock()
	if !initDone {
		t := time.NewTimer(s.opts.InitTimeout - time.Since(s.started))
		defer t.Stop()
		handoff = t.C
	}
	inv.deadline = time.Now().Add(s.opts.Timeout) // provisional; set again at handoff
	select {
	case s.invokes <- inv:
	case <-s.exited:
		res.Error = s.exitError(inv.id, "before asking for an invocation")
		res.Logs = s.logs.since(logStart)
		return res, nil
	case <-handoff:
		s.kill(fmt.Errorf("init did not finish within %s", s.opts.InitTimeout))
		res.Error = &FunctionError{Type: ErrorTypeInitError, Message: fmt.Sprintf("RequestId: %s Error: init did not finish within %s", inv.id, s.opts.InitTimeout)}
		res.Error.Raw, _ = json.Marshal(res.Error)
		res.Logs = s.logs.since(logStart)
		return res, nil
	case <-ctx.Done():
		return res, ctx.Err()
	}
	<-inv.taken
	start := time.Now()
	// Drop the token of the GET /next that took this invocation: the next token then means
	// the runtime finished with it.
	select {
	case <-s.nextCalls:
	default:
	}
	if firstInvoke {
		s.mu.Lock()
		res.InitDuration = s.firstNext.Sub(s.started)
		s.mu.Unlock()
	}

	timer := time.NewTimer(time.Until(inv.deadline))
	defer timer.Stop()
	select {
	case r := <-inv.done:
		res.Duration = time.Since(start)
		res.Payload, res.Error = r.payload, r.err
	case <-timer.C:
		res.Duration = time.Since(start)
		msg := fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", inv.id, s.opts.Timeout.Seconds())
		s.kill(errors.New("the function timed out"))
		res.Error = &FunctionError{Type: ErrorTypeTimeout, Message: msg}
		res.Error.Raw, _ = json.Marshal(res.Error)
	case <-s.exited:
		res.Duration = time.Since(start)
		// The answer may have arrived just before the exit.
		select {
		case r := <-inv.done:
			res.Payload, res.Error = r.payload, r.err
		default:
			res.Error = s.exitError(inv.id, "")
		}
	case <-ctx.Done():
		s.kill(ctx.Err())
		return res, ctx.Err()
	}

	// The invocation is complete when the runtime asks for the next one (or exits); its
	// last log lines are written by then.
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	select {
	case <-s.nextCalls:
	case <-s.exited:
	case <-wait.C:
	}
	s.logs.settle(50*time.Millisecond, 500*time.Millisecond)
	res.Logs = s.logs.since(logStart)
	return res, nil
}

// exitError describes the process's exit as Lambda does (Runtime.ExitError), or the init
// error the runtime reported before exiting.
func (s *Session) exitError(id, when string) *FunctionError {
	<-s.exited
	s.mu.Lock()
	initErr := s.initErr
	s.dead = errors.New("the function process exited")
	s.mu.Unlock()
	if initErr != nil {
		return initErr
	}
	status := "exit status 0"
	if s.exitErr != nil {
		status = s.exitErr.Error()
	}
	msg := fmt.Sprintf("RequestId: %s Error: Runtime exited with error: %s", id, status)
	if when != "" {
		msg += " (" + when + ")"
	}
	e := &FunctionError{Type: ErrorTypeExit, Message: msg}
	e.Raw, _ = json.Marshal(e)
	return e
}

// kill stops the process and marks the session dead.
func (s *Session) kill(reason error) {
	s.mu.Lock()
	if s.dead == nil {
		s.dead = reason
	}
	s.mu.Unlock()
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.exited
}

// Close stops the process (SIGTERM, then SIGKILL after a second, as Lambda's shutdown does)
// and the Runtime API endpoint, and waits until both are gone.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.mu.Lock()
		if s.dead == nil {
			s.dead = errors.New("session closed")
		}
		s.mu.Unlock()
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}
		_ = s.srv.Close()
	})
	return nil
}

// Logs returns everything the process has written so far.
func (s *Session) Logs() []byte { return s.logs.bytes() }

// Runtime API handlers --------------------------------------------------------------------

func (s *Session) handleNext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.firstNext.IsZero() {
		s.firstNext = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.nextCalls <- struct{}{}:
	default:
	}
	select {
	case inv := <-s.invokes:
		inv.deadline = time.Now().Add(s.opts.Timeout)
		s.mu.Lock()
		s.current = inv
		s.mu.Unlock()
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", s.FunctionARN())
		h.Set("Lambda-Runtime-Trace-Id", newTraceID())
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(inv.event)
		close(inv.taken)
	case <-r.Context().Done():
	case <-s.closing:
		// Hold the runtime here until it is stopped, as a frozen sandbox would.
		<-r.Context().Done()
	}
}

func (s *Session) handleResponse(w http.ResponseWriter, r *http.Request) {
	inv, ok := s.takeCurrent(w, r.PathValue("id"))
	if !ok {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		inv.done <- &response{err: &FunctionError{Type: "Runtime.ResponseError", Message: err.Error()}}
		accepted(w)
		return
	}
	// A streamed response that failed midway reports the error in trailers.
	if typ := r.Trailer.Get("Lambda-Runtime-Function-Error-Type"); typ != "" {
		fe := &FunctionError{Type: typ}
		if raw, err := base64.StdEncoding.DecodeString(r.Trailer.Get("Lambda-Runtime-Function-Error-Body")); err == nil {
			fe.Raw = raw
			_ = json.Unmarshal(raw, fe)
			fe.Type = typ
		}
		inv.done <- &response{err: fe}
		accepted(w)
		return
	}
	inv.done <- &response{payload: body}
	accepted(w)
}

func (s *Session) handleError(w http.ResponseWriter, r *http.Request) {
	inv, ok := s.takeCurrent(w, r.PathValue("id"))
	if !ok {
		return
	}
	inv.done <- &response{err: readError(r)}
	accepted(w)
}

func (s *Session) handleInitError(w http.ResponseWriter, r *http.Request) {
	fe := readError(r)
	if fe.Type == "" {
		fe.Type = ErrorTypeInitError
	}
	s.mu.Lock()
	if s.initErr == nil {
		s.initErr = fe
	}
	s.mu.Unlock()
	accepted(w)
	// Lambda stops a sandbox whose init failed.
	go s.kill(fmt.Errorf("init error: %s", fe.Error()))
}

// takeCurrent returns the in-flight invocation with the given id and clears it, or answers
// the runtime with an error.
func (s *Session) takeCurrent(w http.ResponseWriter, id string) (*invocation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil || s.current.id != id {
		apiError(w, http.StatusBadRequest, "InvalidRequestID", "no invocation "+id+" in progress")
		return nil, false
	}
	inv := s.current
	s.current = nil
	return inv, true
}

func readError(r *http.Request) *FunctionError {
	raw, _ := io.ReadAll(r.Body)
	fe := &FunctionError{Raw: raw}
	if err := json.Unmarshal(raw, fe); err != nil || (fe.Type == "" && fe.Message == "") {
		fe.Message = strings.TrimSpace(string(raw))
	}
	if typ := r.Header.Get("Lambda-Runtime-Function-Error-Type"); typ != "" && fe.Type == "" {
		fe.Type = typ
	}
	return fe
}

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"OK"}`))
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"errorType": typ, "errorMessage": msg})
}

// ids ----------------------------------------------------------------------------------

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// newRequestID returns a random UUID (version 4), the form of Lambda request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newTraceID returns an X-Ray trace header as Lambda passes it (not sampled: no daemon).
func newTraceID() string {
	return fmt.Sprintf("Root=1-%08x-%s;Parent=%s;Sampled=0", time.Now().Unix(), randomHex(24), randomHex(16))
}

// log capture ----------------------------------------------------------------------------

// logBuffer collects the process output; exec.Cmd writes stdout and stderr through it one
// write at a time.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	last  time.Time
	live  io.Writer
	liveM sync.Mutex
}

// Write records p (and copies it to the live output).
func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.last = time.Now()
	l.mu.Unlock()
	if l.live != nil {
		l.liveM.Lock()
		_, _ = l.live.Write(p)
		l.liveM.Unlock()
	}
	return len(p), nil
}

func (l *logBuffer) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

func (l *logBuffer) since(off int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off > l.buf.Len() {
		off = l.buf.Len()
	}
	return bytes.Clone(l.buf.Bytes()[off:])
}

func (l *logBuffer) bytes() []byte { return l.since(0) }

// settle waits until no output arrived for quiet (at most max), so output the process wrote
// just before asking for the next invocation has been copied from its pipe. The quiet
// period counts from the call at the earliest: output written long before says nothing
// about a line still in the pipe, whose copy may lag on a loaded machine.
func (l *logBuffer) settle(quiet, max time.Duration) {
	start := time.Now()
	end := start.Add(max)
	for time.Now().Before(end) {
		l.mu.Lock()
		idle := time.Since(l.last)
		l.mu.Unlock()
		idle = min(idle, time.Since(start))
		if idle >= quiet {
			return
		}
		time.Sleep(quiet - idle)
	}
}
