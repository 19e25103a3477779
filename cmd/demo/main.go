// Command demo is `make demo`: it runs an event-driven order workload through the real
// Lambda handlers of the SAM application on a local DynamoDB engine — SQS batches to many
// concurrent order processors, StockAdjusted events to the inventory updater, holder
// crashes found by the janitor on the lock table's stream — then the same workload
// through naive read-then-write code, and reports both (see package internal/demo).
//
// It starts (and afterwards stops) DynamoDB Local unless DYNAMODB_ENDPOINT names a
// running engine. It exits 0 when every invariant holds, 1 when one fails (naming it),
// 2 on bad flags.
//
// Usage:
//
//	go run ./cmd/demo [-orders 300] [-concurrency 12] [-seed 1] [-crashes 3] [-hot-skus 4] [-json demo-report.json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/demo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	def := demo.DefaultConfig()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	orders := fs.Int("orders", def.Orders, "orders to submit")
	concurrency := fs.Int("concurrency", def.Concurrency, "concurrent order-processor invocations (Lambda concurrency)")
	seed := fs.Uint64("seed", def.Seed, "workload seed")
	crashes := fs.Int("crashes", def.Crashes, "holder crashes to inject")
	hot := fs.Int("hot-skus", def.HotSKUs, fmt.Sprintf("hot SKUs in the catalogue (1..%d)", demo.MaxHotSKUs))
	legacy := fs.Bool("legacy", false, "also run the handlers as before (1s wait budget, then back to SQS) for comparison")
	poison := fs.Int("poison", 0, "malformed messages to send (0: orders/100, at least 2; -1: none)")
	jsonPath := fs.String("json", "demo-report.json", "where to write the report (\"\" for nowhere)")
	logPath := fs.String("log", "", "where to write the handlers' JSON logs (default .cache/demo/handlers.log)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg := def
	cfg.Orders, cfg.Concurrency, cfg.Seed, cfg.Crashes, cfg.HotSKUs = *orders, *concurrency, *seed, *crashes, *hot
	cfg.Legacy, cfg.Poison = *legacy, *poison
	cfg.Endpoint = "-" // checked for real once the engine is known
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	if endpoint != "" {
		fmt.Fprintf(stdout, "engine:   %s (from %s)\n", endpoint, ddblocal.EnvEndpoint)
	} else {
		fmt.Fprintln(stdout, "engine:   starting DynamoDB Local ...")
		engine, err := ddblocal.Start(ctx, ddblocal.Options{})
		if err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		defer func() {
			if err := engine.Stop(); err != nil {
				fmt.Fprintln(stderr, "demo: stop engine:", err)
			}
		}()
		endpoint = engine.Endpoint()
		fmt.Fprintf(stdout, "engine:   DynamoDB Local at %s (pid %d, up in %.1fs)\n", endpoint, engine.PID(), time.Since(started).Seconds())
	}
	cfg.Endpoint = endpoint
	cfg.Out = stdout
	cfg.TTY = isTerminal(stdout)

	lp := *logPath
	if lp == "" {
		if root, err := ddblocal.FindRoot(); err == nil {
			lp = filepath.Join(root, ".cache", "demo", "handlers.log")
		}
	}
	if lp != "" {
		if err := os.MkdirAll(filepath.Dir(lp), 0o755); err == nil {
			if f, err := os.Create(lp); err == nil {
				defer f.Close()
				cfg.Log = f
			}
		}
	}

	rep, err := demo.Run(ctx, cfg)
	if rep != nil {
		rep.DurationS = float64(int(time.Since(started).Seconds()*10)) / 10
		rep.WriteText(stdout)
		if *jsonPath != "" {
			if werr := rep.WriteJSON(*jsonPath); werr != nil {
				fmt.Fprintln(stderr, "demo: write report:", werr)
				return 1
			}
			fmt.Fprintf(stdout, "report:   %s", *jsonPath)
			if cfg.Log != nil {
				fmt.Fprintf(stdout, " · handler logs: %s", lp)
			}
			fmt.Fprintln(stdout)
		}
	}
	switch {
	case errors.Is(err, demo.ErrInvariants):
		if rep.InvariantsOK {
			fmt.Fprintln(stderr, "demo: FAILED: checks failed:")
		} else {
			fmt.Fprintln(stderr, "demo: FAILED: invariants violated:")
		}
		for _, v := range rep.Violations {
			fmt.Fprintln(stderr, "  -", v)
		}
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
