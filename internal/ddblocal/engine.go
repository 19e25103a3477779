package ddblocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// MainClass is DynamoDB Local's entry point (3.x moved it from com.amazonaws).
const MainClass = "software.amazon.dynamodb.services.local.main.ServerRunner"

// DefaultStartTimeout bounds how long Start waits for the engine to answer ListTables.
const DefaultStartTimeout = 60 * time.Second

// DefaultJVMArgs keep the JVM small and quick to start: tests run several engines at once.
var DefaultJVMArgs = []string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// Options configure Start. The zero value starts an in-memory engine on a free loopback port
// from the default cache directory.
type Options struct {
	// CacheDir holds the fetched artifact and the engine logs; default DefaultCacheDir().
	CacheDir string
	// LibDir holds the jars and native libraries; default: Ensure(ctx, CacheDir).
	LibDir string
	// Port to listen on; 0 picks a free loopback port (retrying on a bind race).
	Port int
	// LogPath receives the engine's stdout and stderr. By default it is
	// <CacheDir>/logs/engine-<port>.log, removed again when Stop succeeds.
	LogPath string
	// StartTimeout bounds the wait for ListTables; default DefaultStartTimeout.
	StartTimeout time.Duration
	// JVMArgs replace DefaultJVMArgs when non-nil.
	JVMArgs []string
	// Detach starts the engine in its own session so that it outlives this process (used
	// by cmd/ddblocal). Otherwise the engine gets its own process group and is killed when
	// this process dies.
	Detach bool
}

// Engine is a running DynamoDB Local process.
type Engine struct {
	endpoint string
	logPath  string
	tempLog  bool // logPath was chosen by Start: remove it after a clean Stop
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited (not for detached engines)
	waitErr  error

	stopOnce sync.Once
	stopErr  error
}

// Endpoint returns the engine's URL, e.g. http://127.0.0.1:8000.
func (e *Engine) Endpoint() string { return e.endpoint }

// PID returns the java process id (also its process group id).
func (e *Engine) PID() int { return e.cmd.Process.Pid }

// LogPath returns the file receiving the engine's output.
func (e *Engine) LogPath() string { return e.logPath }

// Start launches DynamoDB Local and waits until it answers ListTables.
func Start(ctx context.Context, opts Options) (*Engine, error) {
	var err error
	if opts.CacheDir == "" {
		if opts.CacheDir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	if opts.LibDir == "" {
		if opts.LibDir, err = Ensure(ctx, opts.CacheDir); err != nil {
			return nil, err
		}
	} else if err := checkTools(false); err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}

	const attempts = 3
	for i := 1; ; i++ {
		port := opts.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		e, err := start(ctx, opts, port)
		if err == nil {
			return e, nil
		}
		// Another process may have taken the port between our probe and java's bind.
		if opts.Port != 0 || i == attempts || !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
}

var (
	errExitedEarly = errors.New("engine exited before it answered")
	errPortTaken   = errors.New("engine could not bind its port")
)

func start(ctx context.Context, opts Options, port int) (*Engine, error) {
	logPath := opts.LogPath
	if logPath == "" {
		logPath = filepath.Join(opts.CacheDir, "logs", "engine-"+strconv.Itoa(port)+".log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create engine log: %w", err)
	}
	defer logFile.Close() // the child has its own copy of the descriptor

	jvm := opts.JVMArgs
	if jvm == nil {
		jvm = DefaultJVMArgs
	}
	args := append([]string{}, jvm...)
	args = append(args,
		"-Djava.library.path="+opts.LibDir,
		"-Dsqlite4java.library.path="+opts.LibDir,
		"-cp", filepath.Join(opts.LibDir, "*"),
		MainClass,
		"-inMemory", "-sharedDb", "-port", strconv.Itoa(port), "-disableTelemetry",
	)
	// Not CommandContext: the engine's lifetime is managed by Stop, not by ctx.
	cmd := exec.Command("java", args...)
	cmd.Dir = opts.CacheDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start java: %w", err)
	}

	e := &Engine{
		endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		logPath:  logPath,
		tempLog:  opts.LogPath == "",
		cmd:      cmd,
		done:     make(chan struct{}),
	}
	go func() {
		e.waitErr = cmd.Wait()
		close(e.done)
	}()

	if err := e.waitReady(ctx, opts.StartTimeout); err != nil {
		e.tempLog = false // keep the log of a failed start
		_ = e.Stop()
		logTail := readTail(logPath, 30)
		if errors.Is(err, errExitedEarly) && (strings.Contains(logTail, "BindException") ||
			strings.Contains(logTail, "ddress already in use")) {
			err = fmt.Errorf("%w: port %d taken", errPortTaken, port)
		}
		return nil, fmt.Errorf("DynamoDB Local at %s: %w\nlast lines of %s:\n%s",
			e.endpoint, err, logPath, logTail)
	}
	return e, nil
}

// waitReady polls ListTables until the engine answers, the process exits or timeout passes.
func (e *Engine) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := NewClient(ctx, e.endpoint, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		return err
	}
	var last error
	for {
		select {
		case <-e.done:
			return fmt.Errorf("%w (%v)", errExitedEarly, e.waitErr)
		default:
		}
		if last = PingClient(ctx, client, 2*time.Second); last == nil {
			return nil
		}
		select {
		case <-e.done:
			return fmt.Errorf("%w (%v)", errExitedEarly, e.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not answering ListTables after %s: %w", timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop terminates the engine's process group (SIGTERM, then SIGKILL after 5s) and waits for
// it to exit. It is safe to call more than once.
func (e *Engine) Stop() error {
	e.stopOnce.Do(func() {
		e.stopErr = e.signal(syscall.SIGTERM, 5*time.Second)
		if e.stopErr == nil && e.tempLog {
			_ = os.Remove(e.logPath)
		}
	})
	return e.stopErr
}

// Kill ends the engine's process group with SIGKILL at once and waits for it, simulating a
// crash.
func (e *Engine) Kill() error {
	e.stopOnce.Do(func() {
		e.stopErr = e.signal(syscall.SIGKILL, 0)
		if e.stopErr == nil && e.tempLog {
			_ = os.Remove(e.logPath)
		}
	})
	return e.stopErr
}

func (e *Engine) signal(sig syscall.Signal, grace time.Duration) error {
	pid := e.cmd.Process.Pid
	select {
	case <-e.done:
		return nil
	default:
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal engine %d: %w", pid, err)
	}
	if grace > 0 {
		select {
		case <-e.done:
			return nil
		case <-time.After(grace):
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill engine %d: %w", pid, err)
		}
	}
	select {
	case <-e.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("engine %d did not exit after SIGKILL", pid)
	}
}

// StopPID stops an engine this process did not start (cmd/ddblocal stop): SIGTERM to its
// process group, SIGKILL after grace, then waits until the process is gone.
func StopPID(pid int, grace time.Duration) error {
	if !alive(pid) {
		return nil
	}
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		// Not a group leader (should not happen for our engines): signal the process.
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal engine %d: %w", pid, err)
		}
	}
	if waitGone(pid, grace) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("engine %d did not exit after SIGKILL", pid)
}

// IsEngine reports whether pid is a live DynamoDB Local process (guards against a pid file
// that outlived its process and a recycled pid).
func IsEngine(pid int) bool {
	if !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return true // no procfs: trust the signal probe
	}
	return strings.Contains(string(cmdline), MainClass)
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !alive(pid)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func readTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(b) == 0 {
		return "(log is empty)"
	}
	return tail(b, n)
}
