// Command ddblocal manages a detached DynamoDB Local engine for development.
//
//	go run ./cmd/ddblocal start   # start (or reuse) the engine; last line: DYNAMODB_ENDPOINT=...
//	go run ./cmd/ddblocal stop    # stop the engine started by start
//	go run ./cmd/ddblocal status  # print the endpoint if the engine answers, else exit 1
//	go run ./cmd/ddblocal fetch   # only fetch DynamoDB Local into the cache (needs mvn)
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
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

const usage = "usage: ddblocal start|stop|status|fetch"

func main() {
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
