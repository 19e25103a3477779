// Command playground is `make playground`: live locks of every kind on a local engine, for
// `turnstile locks` to show on a fresh clone.
//
//	go run ./cmd/playground start [-duration 10m] [-prefix turnstile-playground] [-state-dir DIR]
//	go run ./cmd/playground stop  [-state-dir DIR]
//
// start needs DYNAMODB_ENDPOINT (make playground starts or reuses the engine of `make
// engine` and sets it). It stops the holders of an earlier start, creates the lock table
// <prefix>-locks and the data table <prefix>-inventory from template.yaml (recreating them
// if they exist), then leaves:
//
//   - order#1042   a Mutex lease abandoned: its holder stopped heartbeating and exited
//     (this process, without releasing), so its lease end passes;
//   - sku#PEAR     a Mutex lock acquired and released;
//
// and starts, detached, a holder process (`playground hold`) that keeps for -duration:
//
//   - sku#GPU-4090 a Mutex held (heartbeating) with two waiters queued behind it;
//   - sku#HOT-DEAL a TicketLock held with two waiters;
//   - order#2002   a Queue held with two waiters;
//   - SKU#apple    an inventory item locked by an ItemLocker, with one waiter;
//
// then it waits until the Inspector sees all of that and prints how to point the CLI at it.
// After -duration (or on stop, SIGTERM) the holder process releases everything and exits.
// The holders' pid and log are in the state directory (default .cache/playground).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = `usage: playground start [-duration 10m] [-prefix turnstile-playground] [-state-dir DIR]
       playground stop  [-state-dir DIR]`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one command; it returns the exit status (0 done, 1 failed, 2 bad usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("playground "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := defaultOptions()
	fs.StringVar(&o.stateDir, "state-dir", "", "where the holders' pid and log are kept (default .cache/playground in the repository)")
	switch cmd {
	case "start", "hold":
		fs.DurationVar(&o.duration, "duration", o.duration, "how long the holders keep their locks before releasing them and exiting")
		fs.StringVar(&o.prefix, "prefix", o.prefix, "table name prefix: <prefix>-locks and <prefix>-inventory")
	case "stop":
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "playground: unknown command %q\n%s\n", cmd, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "playground %s: unexpected arguments %q\n", cmd, fs.Args())
		return 2
	}
	if o.duration <= 0 {
		fmt.Fprintln(stderr, "playground: -duration must be positive")
		return 2
	}
	if err := o.resolve(); err != nil {
		fmt.Fprintln(stderr, "playground:", err)
		return 1
	}
	var err error
	switch cmd {
	case "start":
		err = start(ctx, o, stdout, stderr)
	case "hold":
		err = hold(ctx, o, stdout)
	case "stop":
		err = stopHolders(o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "playground %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// options are the flags of every command.
type options struct {
	duration time.Duration
	prefix   string
	stateDir string
	endpoint string // DYNAMODB_ENDPOINT
}

func defaultOptions() options {
	return options{duration: 10 * time.Minute, prefix: "turnstile-playground"}
}

func (o options) lockTable() string { return o.prefix + "-locks" }
func (o options) itemTable() string { return o.prefix + "-inventory" }
