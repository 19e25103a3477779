// Command ddblocal manages a detached DynamoDB Local engine for development.
//
//	go run ./cmd/ddblocal start   # start (or reuse) the engine; last line: DYNAMODB_ENDPOINT=...
//	go run ./cmd/ddblocal stop    # stop the engine started by start
//	go run ./cmd/ddblocal status  # print the endpoint if the engine answers, else exit 1
//	go run ./cmd/ddblocal fetch   # only fetch DynamoDB Local into the cache (needs mvn)
//	go run ./cmd/ddblocal exec -- CMD [ARGS]  # run CMD with its own engine, then stop it
//
// The engine's pid and endpoint are kept in .cache/dynamodb-local/engine.pid and
// engine.endpoint, its output in engine.log. When DYNAMODB_ENDPOINT is set, start starts
// nothing and prints that endpoint.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

const usage = "usage: ddblocal start|stop|status|fetch|exec -- CMD [ARGS...]"

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "exec" {
		os.Exit(execWithEngine(os.Args[2:]))
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "ddblocal:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, command string) error {
	cacheDir, err := ddblocal.DefaultCacheDir()
	if err != nil {
		return err
	}
	files := stateFiles{
		pid:      filepath.Join(cacheDir, "engine.pid"),
		endpoint: filepath.Join(cacheDir, "engine.endpoint"),
		log:      filepath.Join(cacheDir, "engine.log"),
	}
	switch command {
	case "start":
		return start(ctx, cacheDir, files)
	case "stop":
		return stopEngine(files)
	case "status":
		endpoint, ok := files.running(ctx)
		if !ok {
			return errors.New("no engine running")
		}
		fmt.Println("DYNAMODB_ENDPOINT=" + endpoint)
		return nil
	case "fetch":
		libDir, err := ddblocal.Ensure(ctx, cacheDir)
		if err != nil {
			return err
		}
		fmt.Println("DynamoDB Local is in", libDir)
		return nil
	default:
		return fmt.Errorf("unknown command %q; %s", command, usage)
	}
}

func start(ctx context.Context, cacheDir string, files stateFiles) error {
	if endpoint := os.Getenv(ddblocal.EnvEndpoint); endpoint != "" {
		fmt.Println("DYNAMODB_ENDPOINT is set; using it, starting nothing")
		fmt.Println("DYNAMODB_ENDPOINT=" + endpoint)
		return nil
	}
	if endpoint, ok := files.running(ctx); ok {
		fmt.Println("DynamoDB Local already running")
		fmt.Println("DYNAMODB_ENDPOINT=" + endpoint)
		return nil
	}
	// A stale engine (pid file present, not answering) is stopped before starting anew.
	if err := stopEngine(files); err != nil {
		return err
	}

	engine, err := ddblocal.Start(ctx, ddblocal.Options{
		CacheDir: cacheDir,
		LogPath:  files.log,
		Detach:   true,
	})
	if err != nil {
		return err
	}
	if err := files.write(engine.PID(), engine.Endpoint()); err != nil {
		_ = engine.Stop()
		return err
	}
	fmt.Printf("DynamoDB Local started (pid %d, log %s); stop it with: go run ./cmd/ddblocal stop\n",
		engine.PID(), files.log)
	fmt.Println("DYNAMODB_ENDPOINT=" + engine.Endpoint())
	return nil
}

func stopEngine(files stateFiles) error {
	pid, err := files.readPID()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if ddblocal.IsEngine(pid) {
		if err := ddblocal.StopPID(pid, 5*time.Second); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "stopped DynamoDB Local (pid %d)\n", pid)
	}
	return files.remove()
}

type stateFiles struct{ pid, endpoint, log string }

func (f stateFiles) readPID() (int, error) {
	b, err := os.ReadFile(f.pid)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", f.pid, err)
	}
	return pid, nil
}

// running returns the endpoint of the engine recorded in the state files if it is alive
// and answers ListTables.
func (f stateFiles) running(ctx context.Context) (string, bool) {
	pid, err := f.readPID()
	if err != nil || !ddblocal.IsEngine(pid) {
		return "", false
	}
	b, err := os.ReadFile(f.endpoint)
	if err != nil {
		return "", false
	}
	endpoint := strings.TrimSpace(string(b))
	if ddblocal.Ping(ctx, endpoint, 3*time.Second) != nil {
		return "", false
	}
	return endpoint, true
}

func (f stateFiles) write(pid int, endpoint string) error {
	if err := os.WriteFile(f.endpoint, []byte(endpoint+"\n"), 0o644); err != nil {
		return fmt.Errorf("write endpoint file: %w", err)
	}
	if err := os.WriteFile(f.pid, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	return nil
}

func (f stateFiles) remove() error {
	for _, p := range []string{f.pid, f.endpoint} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// execWithEngine runs a command with DYNAMODB_ENDPOINT pointing at an engine of its own
// (or at the one DYNAMODB_ENDPOINT already names), stops the engine afterwards and returns
// the command's exit code. It is how `make test` runs the tests of the lockcore module,
// which cannot use this module's test harness.
func execWithEngine(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	if os.Getenv(ddblocal.EnvEndpoint) == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		engine, err := ddblocal.Start(ctx, ddblocal.Options{})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "ddblocal: cannot start the local DynamoDB engine: %v\n", err)
			return 1
		}
		defer func() { _ = engine.Stop() }()
		if err := os.Setenv(ddblocal.EnvEndpoint, engine.Endpoint()); err != nil {
			fmt.Fprintln(os.Stderr, "ddblocal:", err)
			return 1
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "ddblocal: exec:", err)
		return 1
	}
	go func() {
		for sig := range sigs {
			_ = cmd.Process.Signal(sig)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1)
	default:
		fmt.Fprintln(os.Stderr, "ddblocal: exec:", err)
		return 1
	}
}
