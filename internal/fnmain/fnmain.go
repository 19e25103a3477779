// Package fnmain is the main of every function: logging, the AWS configuration, the shop
// service, then the Lambda runtime with the handler the function builds from them.
package fnmain

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// Env is what a function's handler is built from.
type Env struct {
	Config  aws.Config       // loaded by obs.AWSConfig (endpoint overrides refused inside Lambda)
	DB      *dynamodb.Client // on Config
	Tables  shop.Tables      // from LOCK_TABLE, ORDERS_TABLE, INVENTORY_TABLE
	Service *shop.Service    // on DB and Tables, owner "<function>-<random>"
	Log     *slog.Logger     // obs.Setup's
}

// Run builds the function's Env, asks build for its Lambda handler (anything lambda.Start
// takes) and starts the runtime, the handler traced as obs.TraceHandler says. A configuration error is logged and ends the process at
// cold start: the function cannot serve any event then.
func Run(function string, build func(Env) (handler any, err error)) {
	log := obs.Setup()
	fail := func(what string, err error) {
		log.Error(function+": "+what, "error", err)
		os.Exit(1)
	}
	cfg, err := obs.AWSConfig(context.Background())
	if err != nil {
		fail("AWS configuration", err)
	}
	e := Env{Config: cfg, DB: dynamodb.NewFromConfig(cfg), Tables: shop.TablesFromEnv(), Log: log}
	if e.Service, err = shop.NewService(e.DB, e.Tables, shop.WithOwner(shop.NewOwner(function)), shop.WithLogger(log)); err != nil {
		fail("configuration", err)
	}
	h, err := build(e)
	if err != nil {
		fail("configuration", err)
	}
	// TraceHandler wraps the handler in an invocation span when the OpenTelemetry back
	// end is on (TURNSTILE_TRACING=otel); with X-Ray it returns the handler unchanged.
	lambda.Start(obs.TraceHandler(lambda.NewHandler(h)))
}
