// Command turnstile operates turnstile's locks: it lists and shows the locks of a lock
// table (every lockcore strategy), watches one live, lists abandoned leases, and
// force-releases a stuck lease with an audit record.
//
// Install:
//
//	go install github.com/turnstile-locks/turnstile/cmd/turnstile@latest
//
// Usage:
//
//	turnstile locks ls        [--state held,abandoned,released] [--strategy mutex,ticket,queue]
//	turnstile locks show      KEY [--namespace NS] [--strategy mutex|ticket|queue]
//	turnstile locks show      --lease ID [--namespace NS] [--strategy mutex|ticket|queue]
//	turnstile locks show      --strategy item --item-table TABLE ATTR=VALUE[,ATTR=VALUE]
//	turnstile locks watch     KEY [--interval 1s] [--namespace NS] [--strategy S]
//	turnstile locks abandoned [--skew 5s]
//	turnstile locks release   KEY --force --reason TEXT (--lease ID [--token N] | --token N | --current) [--actor NAME] [--namespace NS] [--strategy mutex|ticket]
//
// Every command takes --table, --endpoint, --stack, --region and -o table|json. The lock
// table is --table, else $TURNSTILE_LOCK_TABLE, else the LockTableName output of the
// CloudFormation stack named by --stack (or $TURNSTILE_STACK). The endpoint is
// --endpoint, else $DYNAMODB_ENDPOINT, else AWS's regional endpoint with the default
// credential chain. Exit status: 0 done, 1 failed, 2 bad usage. -h, --help or help at
// any level prints its usage to stdout and exits 0. docs/cli.md describes the
// output (JSON fields included) and the error messages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, systemEnv())
	stop()
	os.Exit(code)
}

// env is what the command takes from its surroundings; tests replace it.
type env struct {
	getenv   func(string) string
	terminal bool // stdout is a terminal: watch redraws the screen
	// stackOutputs returns the outputs of a CloudFormation stack.
	stackOutputs func(ctx context.Context, stack, region string) (map[string]string, error)
	// callerARN returns the AWS caller identity's ARN (for the audit record's actor).
	callerARN func(ctx context.Context, endpoint, region string) (string, error)
}

func systemEnv() env {
	fi, err := os.Stdout.Stat()
	return env{
		getenv:       os.Getenv,
		terminal:     err == nil && fi.Mode()&os.ModeCharDevice != 0,
		stackOutputs: cloudFormationOutputs,
		callerARN:    stsCallerARN,
	}
}

// usageError is bad usage: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

const topUsage = `turnstile operates turnstile's DynamoDB locks.

Usage:
  turnstile locks ls         list the locks of the lock table
  turnstile locks show KEY   show every lock on KEY: holder, lease, fence, waiters, audit
  turnstile locks show --lease ID
                             find the lock a lease id (as a holder logs it) holds or waits for
  turnstile locks watch KEY  show KEY again every --interval until Ctrl-C
  turnstile locks abandoned  list leases whose holder's lease end + --skew has passed
  turnstile locks release KEY --force --reason TEXT (--lease ID [--token N] | --token N | --current)
                             end the named (or --current) lease (Mutex or TicketLock), with an audit record

Run "turnstile locks <command> -h" (or "turnstile locks help <command>") for a command's flags.
Every command takes --table, --stack, --endpoint, --region, -o table|json and --skew.

The lock table: --table, $TURNSTILE_LOCK_TABLE, or the LockTableName output of --stack NAME
($TURNSTILE_STACK). The endpoint: --endpoint, $DYNAMODB_ENDPOINT, or AWS (default credentials).
Exit status: 0 done, 1 failed, 2 bad usage.
`

// command is one "turnstile locks" command.
type command struct {
	run   func(context.Context, *cli, []string) error
	about string // what it does, printed by its -h
}

var commands = map[string]command{
	"ls": {cmdList, `Lists the locks of the lock table, one line each: Mutex, TicketLock and Queue locks.
Rows that are not lock rows (other items kept in the table, lockcore's bookkeeping
rows) are skipped. The Scan reads eventually consistently unless --consistent.`},
	"show": {cmdShow, `Shows every lock on KEY (all namespaces and strategies unless narrowed): state,
holder and lease id, lease end, fence, revision, waiters in the order they enter, and
the force-release audit. A holder or waiter shown as "ticket N" whose owner is not
recorded is shown with its lease id as "<owner>#<suffix>": the suffix matches the
lease id its process logs.

With --lease ID instead of KEY, scans the table for the lock that lease holds or
waits for (a lease id as the holder logs it, e.g. orderprocessor-7f3a#yA3b_9Qz).

With --strategy item --item-table TABLE, KEY is a data item's primary key
(ATTR=VALUE[,ATTR=VALUE]) and show reads an ItemLocker's lock attributes on it.`},
	"watch": {cmdWatch, `Shows KEY as show does, again every --interval, until Ctrl-C (or --count refreshes),
with how long each holder and revision have stayed unchanged on this machine's clock:
what lockcore's waiters measure before they take over.`},
	"abandoned": {cmdAbandoned, `Lists held leases whose holder's recorded lease end + --skew lies in the past by this
machine's clock. Informational only: a paused holder may renew a moment later.`},
	"release": {cmdRelease, `Ends a Mutex or TicketLock lease another process holds (force-release), with an audit
record of who, when and why. Name the lease as locks show printed it (--lease, --token),
or pass --current to end whatever lease is current when release runs.`},
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

func run(ctx context.Context, args []string, stdout, stderr io.Writer, e env) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, topUsage)
		return 2
	case args[0] == "help" && len(args) > 1: // "turnstile help locks [command]"
		if args[1] != "locks" {
			fmt.Fprintf(stderr, "turnstile help: unknown command %q\n\n%s", args[1], topUsage)
			return 2
		}
		return runLocks(ctx, append([]string{"help"}, args[2:]...), stdout, stderr, e)
	case isHelp(args[0]):
		fmt.Fprint(stdout, topUsage)
		return 0
	case args[0] != "locks":
		fmt.Fprintf(stderr, "turnstile: unknown command %q\n\n%s", args[0], topUsage)
		return 2
	}
	return runLocks(ctx, args[1:], stdout, stderr, e)
}

// runLocks runs "turnstile locks ...": args start with the command name.
func runLocks(ctx context.Context, args []string, stdout, stderr io.Writer, e env) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "turnstile locks: missing command (ls, show, watch, abandoned, release)\n\n%s", topUsage)
		return 2
	}
	if isHelp(args[0]) {
		if args[0] != "help" || len(args) == 1 {
			fmt.Fprint(stdout, topUsage)
			return 0
		}
		args = []string{args[1], "-h"} // "turnstile locks help show": show's usage
	}
	name := args[0]
	if name == "list" {
		name = "ls"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "turnstile locks: unknown command %q (want ls, show, watch, abandoned or release)\n", args[0])
		return 2
	}
	c := &cli{name: "turnstile locks " + args[0], about: cmd.about, stdout: stdout, stderr: stderr, env: e}
	err := cmd.run(ctx, c, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\nRun \"%s -h\" for usage.\n", c.name, ue.msg, c.name)
		return 2
	case errors.Is(err, lockcore.ErrInvalidOption) || errors.Is(err, lockcore.ErrInvalidKey):
		fmt.Fprintf(stderr, "%s: %v\n", c.name, err)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", c.name, c.explain(ctx, err))
	return 1
}

// cli is one command invocation: its flags, output and clients.
type cli struct {
	name           string
	about          string
	stdout, stderr io.Writer
	env            env

	fs                             *flag.FlagSet
	table, endpoint, stack, region string
	output                         string
	skew                           time.Duration
	attrs                          string // --attributes PK,SK,TTL
	namespace, strategy, itemTable string
	positional                     []string
	synopsis                       string
	resolvedTable                  string
	tableFrom                      string // where the table name came from, for messages
	where                          string // the endpoint or AWS region, for messages
	db                             *dynamodb.Client
	target                         string // the table the command reads, for messages
	targetIsLocks                  bool   // target is the lock table (not show's --item-table)
}

// flags declares the flags every command takes.
func (c *cli) flags(synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	// The flag package prints nothing itself: a bad flag is reported once (run), and
	// asked-for help goes to stdout (usage).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.fs, c.synopsis = fs, synopsis
	fs.StringVar(&c.table, "table", "", "lock table name (default $TURNSTILE_LOCK_TABLE, else the stack's LockTableName output)")
	fs.StringVar(&c.endpoint, "endpoint", "", "DynamoDB endpoint URL (default $DYNAMODB_ENDPOINT, else AWS)")
	fs.StringVar(&c.stack, "stack", "", "CloudFormation stack whose LockTableName output names the lock table (default $TURNSTILE_STACK)")
	fs.StringVar(&c.region, "region", "", "AWS region (default from the AWS configuration)")
	fs.StringVar(&c.output, "o", "table", "output format: table or json")
	fs.DurationVar(&c.skew, "skew", lockcore.DefaultInspectSkew, "clock-skew allowance: a lease is abandoned when its holder's lease end + skew has passed")
	fs.StringVar(&c.attrs, "attributes", "", "the lock table's key and TTL attribute names as PK,SK,TTL when they are not pk,sk,expiresAt (default $TURNSTILE_LOCK_ATTRIBUTES)")
	return fs
}

// tableAttributes parses --attributes (or $TURNSTILE_LOCK_ATTRIBUTES): "PK,SK,TTL", any
// part left empty keeping its default.
func (c *cli) tableAttributes() (lockcore.TableAttributes, error) {
	v := c.attrs
	if v == "" {
		v = c.env.getenv("TURNSTILE_LOCK_ATTRIBUTES")
	}
	if v == "" {
		return lockcore.DefaultTableAttributes, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return lockcore.TableAttributes{}, usagef("--attributes %q: want PK,SK,TTL (three names, e.g. pk,sk,expiresAt)", v)
	}
	return lockcore.TableAttributes{PartitionKey: strings.TrimSpace(parts[0]), SortKey: strings.TrimSpace(parts[1]), TTL: strings.TrimSpace(parts[2])}, nil
}

// usage prints the command's usage, description and flags.
func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n\n", c.name, c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "%s\n\n", c.about)
	}
	fmt.Fprintln(w, "Flags:")
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// parse parses flags and positional arguments in any order ("--" ends the flags); -h,
// -help or --help prints the usage to stdout and returns flag.ErrHelp (exit 0).
func (c *cli) parse(args []string, positionals int) error {
	if err := c.parseFlags(args); err != nil {
		return err
	}
	return c.positionals(positionals)
}

// positionals checks the number of positional arguments.
func (c *cli) positionals(n int) error {
	switch {
	case len(c.positional) < n:
		return usagef("missing KEY argument")
	case len(c.positional) > n:
		return usagef("unexpected arguments %q", c.positional[n:])
	}
	return nil
}

// parseFlags parses args, leaving the positional arguments in c.positional.
func (c *cli) parseFlags(args []string) error {
	var rest []string
	if i := indexOf(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.usage(c.stdout)
				return err
			}
			return usagef("%v", err)
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		c.positional = append(c.positional, args[0])
		args = args[1:]
	}
	c.positional = append(c.positional, rest...)
	if c.output != "table" && c.output != "json" {
		return usagef("-o: want table or json, got %q", c.output)
	}
	if c.skew < 0 {
		return usagef("--skew: must not be negative, got %s", c.skew)
	}
	return nil
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

// inspector resolves the table and endpoint and returns an Inspector.
func (c *cli) inspector(ctx context.Context) (*lockcore.Inspector, error) {
	db, err := c.dynamo(ctx)
	if err != nil {
		return nil, err
	}
	table, err := c.lockTable(ctx)
	if err != nil {
		return nil, err
	}
	c.target, c.targetIsLocks = table, true
	attrs, err := c.tableAttributes()
	if err != nil {
		return nil, err
	}
	return lockcore.NewInspector(db, table, lockcore.InspectSkew(c.skew), lockcore.InspectTableAttributes(attrs))
}

func (c *cli) lockTable(ctx context.Context) (string, error) {
	if c.resolvedTable != "" {
		return c.resolvedTable, nil
	}
	switch {
	case c.table != "":
		c.resolvedTable, c.tableFrom = c.table, "--table"
	case c.env.getenv("TURNSTILE_LOCK_TABLE") != "":
		c.resolvedTable, c.tableFrom = c.env.getenv("TURNSTILE_LOCK_TABLE"), "$TURNSTILE_LOCK_TABLE"
	default:
		stack := c.stack
		if stack == "" {
			stack = c.env.getenv("TURNSTILE_STACK")
		}
		if stack == "" {
			return "", usagef("no lock table: pass --table NAME, set TURNSTILE_LOCK_TABLE, or name the stack with --stack NAME")
		}
		outs, err := c.env.stackOutputs(ctx, stack, c.region)
		if err != nil {
			return "", fmt.Errorf("--stack %s: %w", stack, err)
		}
		name := outs[stackOutputLockTable]
		if name == "" {
			return "", fmt.Errorf("--stack %s: the stack has no %s output (outputs: %s)", stack, stackOutputLockTable, strings.Join(keys(outs), ", "))
		}
		c.resolvedTable, c.tableFrom = name, "the "+stackOutputLockTable+" output of stack "+stack
	}
	return c.resolvedTable, nil
}

func (c *cli) endpointURL() string {
	if c.endpoint != "" {
		return c.endpoint
	}
	return c.env.getenv("DYNAMODB_ENDPOINT")
}

func (c *cli) key() string { return c.positional[0] }

// lockFlags adds --namespace and --strategy.
func (c *cli) lockFlags(fs *flag.FlagSet, strategies string) {
	fs.StringVar(&c.namespace, "namespace", "", "lock namespace (the lock row's sort key; default: every namespace)")
	fs.StringVar(&c.strategy, "strategy", "", "lock strategy: "+strategies+" (default: every strategy)")
}

func (c *cli) showOptions() (lockcore.ShowOptions, error) {
	o := lockcore.ShowOptions{Namespace: c.namespace}
	if c.strategy != "" {
		st, err := lockcore.ParseStrategy(c.strategy)
		if err != nil {
			return o, usagef("--strategy: want mutex, ticket, queue or item, got %q", c.strategy)
		}
		o.Strategy = st
	}
	return o, nil
}

func cmdList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("[--state held,abandoned,released] [--strategy mutex,ticket,queue] [flags]")
	states := fs.String("state", "", "comma-separated states to list: held, abandoned, released (default all)")
	strategies := fs.String("strategy", "", "comma-separated strategies to list: mutex, ticket, queue (default all)")
	limit := fs.Int("limit", 0, "stop after this many locks (0: the whole table)")
	pageSize := fs.Int("page-size", 0, "rows read per Scan call (0: DynamoDB's 1 MB pages)")
	consistent := fs.Bool("consistent", false, "strongly consistent reads (twice the read capacity)")
	if err := c.parse(args, 0); err != nil {
		return err
	}
	opts := lockcore.ListOptions{PageSize: int32(*pageSize), Consistent: *consistent}
	if *pageSize < 0 || *pageSize > 1<<30 {
		return usagef("--page-size: must be between 0 and 2^30, got %d", *pageSize)
	}
	if *limit < 0 {
		return usagef("--limit: must not be negative, got %d", *limit)
	}
	for _, s := range splitList(*states) {
		st, err := lockcore.ParseLockState(s)
		if err != nil {
			return usagef("--state: want held, abandoned or released, got %q", s)
		}
		opts.States = append(opts.States, st)
	}
	for _, s := range splitList(*strategies) {
		st, err := lockcore.ParseStrategy(s)
		if err != nil || st == lockcore.StrategyItem {
			return usagef("--strategy: want mutex, ticket or queue, got %q", s)
		}
		opts.Strategies = append(opts.Strategies, st)
	}
	return c.list(ctx, opts, *limit)
}

func cmdAbandoned(ctx context.Context, c *cli, args []string) error {
	c.flags("[--skew 5s] [flags]")
	if err := c.parse(args, 0); err != nil {
		return err
	}
	return c.list(ctx, lockcore.ListOptions{States: []lockcore.LockState{lockcore.LockAbandoned}}, 0)
}

var errLimit = errors.New("limit reached")

func (c *cli) list(ctx context.Context, opts lockcore.ListOptions, limit int) error {
	in, err := c.inspector(ctx)
	if err != nil {
		return err
	}
	if err := c.checkLockTable(ctx, in.Table()); err != nil {
		return err
	}
	locks := []lockcore.Lock{}
	err = in.Each(ctx, opts, func(l lockcore.Lock) error {
		locks = append(locks, l)
		if limit > 0 && len(locks) >= limit {
			return errLimit
		}
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return err
	}
	sortLocks(locks)
	if c.output == "json" {
		return writeJSON(c.stdout, locks)
	}
	if len(locks) == 0 {
		what := "locks"
		if len(opts.States) == 1 {
			what = string(opts.States[0]) + " locks"
		}
		fmt.Fprintf(c.stdout, "no %s in table %s\n", what, in.Table())
		return nil
	}
	writeLockTable(c.stdout, locks, time.Now())
	return nil
}

func cmdShow(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("KEY [--namespace NS] [--strategy mutex|ticket|queue] [flags]\n" +
		"       " + c.name + " --lease ID [--namespace NS] [--strategy mutex|ticket|queue] [flags]\n" +
		"       " + c.name + " --strategy item --item-table TABLE ATTR=VALUE[,ATTR=VALUE]")
	c.lockFlags(fs, "mutex, ticket, queue or item")
	fs.StringVar(&c.itemTable, "item-table", "", "with --strategy item: the data table; KEY is its primary key as ATTR=VALUE[,ATTR=VALUE] (string values)")
	lease := fs.String("lease", "", "instead of KEY: find the lock this lease id holds or waits for, as its holder logs it (scans the table)")
	if err := c.parseFlags(args); err != nil {
		return err
	}
	want := 1
	if *lease != "" {
		want = 0
	}
	if err := c.positionals(want); err != nil {
		return err
	}
	opts, err := c.showOptions()
	if err != nil {
		return err
	}
	if opts.Strategy == lockcore.StrategyItem || c.itemTable != "" {
		if *lease != "" {
			return usagef("--lease: not with --strategy item (give the item's KEY)")
		}
		return c.showItem(ctx)
	}
	in, err := c.inspector(ctx)
	if err != nil {
		return err
	}
	if *lease != "" {
		return c.showLease(ctx, in, *lease, opts)
	}
	locks, err := in.Show(ctx, c.key(), opts)
	if errors.Is(err, lockcore.ErrLockNotFound) && strings.Contains(c.key(), "#") {
		return fmt.Errorf("%w\nhint: if %s is a lease id, find its lock with: %s --lease %s", err, c.key(), c.name, c.key())
	}
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(c.stdout, locks)
	}
	writeLocks(c.stdout, locks, time.Now(), nil)
	return nil
}

// showLease finds the locks lease id holds or waits for: a scan of the lock table (as
// ls), then each lock found read again with Show (strongly consistent, with its audit).
func (c *cli) showLease(ctx context.Context, in *lockcore.Inspector, id string, opts lockcore.ShowOptions) error {
	if err := c.checkLockTable(ctx, in.Table()); err != nil {
		return err
	}
	var lopts lockcore.ListOptions
	if opts.Strategy != "" {
		lopts.Strategies = []lockcore.Strategy{opts.Strategy}
	}
	var found []lockcore.Lock
	err := in.Each(ctx, lopts, func(l lockcore.Lock) error {
		if (opts.Namespace == "" || l.Namespace == opts.Namespace) && leaseRole(l, id) != "" {
			found = append(found, l)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("lease %s holds and waits for no lock in table %s (a released or lost lease leaves no trace on the lock rows; "+
			"an ItemLocker lease lives on its data item: show --strategy item): %w", id, in.Table(), lockcore.ErrLockNotFound)
	}
	sortLocks(found)
	locks := []lockcore.Lock{}
	for _, f := range found {
		l, err := in.Show(ctx, f.Key, lockcore.ShowOptions{Namespace: f.Namespace, Strategy: f.Strategy})
		if err != nil {
			return err
		}
		locks = append(locks, l...)
	}
	if c.output == "json" {
		return writeJSON(c.stdout, locks)
	}
	now := time.Now()
	for i, l := range locks {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		role := leaseRole(l, id)
		if role == "" {
			role = "no longer holds or waits for this lock (it did a moment ago)"
		}
		fmt.Fprintf(c.stdout, "lease %s %s:\n", id, role)
		writeLock(c.stdout, l, now, nil)
	}
	return nil
}

// leaseRole says how lease id takes part in l: "holds this lock", "waits for this lock
// (position N)", or "" (not at all).
func leaseRole(l lockcore.Lock, id string) string {
	if l.Holder.MatchesLease(id) {
		return "holds this lock"
	}
	for _, w := range l.Waiters {
		if w.MatchesLease(id) {
			return fmt.Sprintf("waits for this lock (position %d)", w.Position)
		}
	}
	return ""
}

func (c *cli) showItem(ctx context.Context) error {
	if c.itemTable == "" {
		return usagef("--strategy item needs --item-table TABLE (the data table the item lives in)")
	}
	if c.strategy != "" && c.strategy != string(lockcore.StrategyItem) {
		return usagef("--item-table goes with --strategy item, not %q", c.strategy)
	}
	key, err := parseItemKey(c.key())
	if err != nil {
		return err
	}
	db, err := c.dynamo(ctx)
	if err != nil {
		return err
	}
	in, err := lockcore.NewInspector(db, c.itemTable, lockcore.InspectSkew(c.skew))
	if err != nil {
		return err
	}
	c.target = c.itemTable
	il, err := in.ShowItem(ctx, c.itemTable, key, lockcore.ItemAttributes{})
	if err != nil {
		return err
	}
	if c.output == "json" {
		err = writeJSON(c.stdout, il)
	} else {
		writeItemLock(c.stdout, il, time.Now())
	}
	if err == nil && !il.Exists {
		// As for a lock row that is not there (exit 1): a mistyped key must not read as
		// a free lock to a script.
		err = fmt.Errorf("no item %s in %s: %w", c.key(), c.itemTable, lockcore.ErrLockNotFound)
	}
	return err
}

func cmdWatch(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("KEY [--interval 1s] [--namespace NS] [--strategy mutex|ticket|queue] [flags]")
	c.lockFlags(fs, "mutex, ticket or queue")
	interval := fs.Duration("interval", time.Second, "time between refreshes")
	count := fs.Int("count", 0, "stop after this many refreshes (0: until Ctrl-C)")
	if err := c.parse(args, 1); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return usagef("--interval: must be at least 10ms, got %s", *interval)
	}
	if *count < 0 {
		return usagef("--count: must not be negative, got %d", *count)
	}
	opts, err := c.showOptions()
	if err != nil {
		return err
	}
	if opts.Strategy == lockcore.StrategyItem {
		return usagef("--strategy: watch takes mutex, ticket or queue")
	}
	in, err := c.inspector(ctx)
	if err != nil {
		return err
	}
	return watch(ctx, c, in, opts, *interval, *count)
}

func cmdRelease(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("KEY --force --reason TEXT (--lease ID [--token N] | --token N | --current) [--actor NAME] [--namespace NS] [--strategy mutex|ticket] [flags]")
	force := fs.Bool("force", false, "required: confirm ending another process's lease")
	reason := fs.String("reason", "", "required: why the lease is ended (kept in the audit record)")
	actor := fs.String("actor", "", "who releases, for the audit record (default $USER@host, plus the AWS caller ARN against AWS)")
	lease := fs.String("lease", "", "end only this lease id (\"ticket N\" for a ticket lock), as shown by locks show")
	token := fs.Int64("token", 0, "end only the lease with this fencing token: the number locks show prints (4294967297 of \"4294967297 (epoch 1, seq 1)\"); required with a \"ticket N\" lease id")
	current := fs.Bool("current", false, "end whatever lease is current when release runs (instead of --lease/--token: possibly a holder that took over after you looked)")
	fs.StringVar(&c.namespace, "namespace", "lock", "lock namespace")
	fs.StringVar(&c.strategy, "strategy", "mutex", "lock strategy: mutex or ticket")
	if err := c.parse(args, 1); err != nil {
		return err
	}
	if !*force {
		return usagef("--force is required: release ends another process's lease (its guarded writes will fail)")
	}
	if strings.TrimSpace(*reason) == "" {
		return usagef("--reason is required: say why the lease is ended (it goes into the audit record)")
	}
	pinned := *lease != "" || *token != 0
	switch {
	case !pinned && !*current:
		return usagef("--lease or --token is required (as locks show printed them), or --current to end whatever lease is current when release runs — possibly a live holder that took the lock over after you looked")
	case pinned && *current:
		return usagef("--current: not with --lease or --token (they pin the lease to end)")
	}
	st, err := lockcore.ParseStrategy(c.strategy)
	if err != nil || (st != lockcore.StrategyMutex && st != lockcore.StrategyTicket) {
		return usagef("--strategy: release takes mutex or ticket, got %q", c.strategy)
	}
	who, err := c.actor(ctx, *actor)
	if err != nil {
		return err
	}
	in, err := c.inspector(ctx)
	if err != nil {
		return err
	}
	rec, err := in.ForceRelease(ctx, c.key(), lockcore.ForceOptions{
		Namespace: c.namespace, Strategy: st, Actor: who, Reason: *reason, LeaseID: *lease, Token: lockcore.Fence(*token),
	})
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(c.stdout, rec)
	}
	writeForceRecord(c.stdout, rec)
	return nil
}

// actor names the operator for the audit record.
func (c *cli) actor(ctx context.Context, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	who := c.env.getenv("USER")
	if who == "" {
		who = c.env.getenv("LOGNAME")
	}
	if host, _ := os.Hostname(); who != "" && host != "" {
		who += "@" + host
	}
	if ep := c.endpointURL(); ep == "" || !isLoopback(ep) {
		// Against AWS the caller's identity says who it really is.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		arn, err := c.env.callerARN(cctx, ep, c.region)
		cancel()
		switch {
		case err == nil && who != "":
			who += " (" + arn + ")"
		case err == nil:
			who = arn
		}
	}
	if who == "" {
		return "", usagef("--actor: cannot tell who you are ($USER is empty and the AWS caller identity is unknown); pass --actor NAME")
	}
	return who, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
