// Command janitor is the JanitorFunction Lambda (template.yaml): it reports abandoned
// leases from the lock table's TTL deletions, re-drives their orders and sweeps
// long-expired lock rows. The logic is in package handler.
package main

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

func main() {
	log := obs.Setup()
	cfg, err := obs.AWSConfig(context.Background())
	if err != nil {
		log.Error("janitor: AWS configuration", "error", err)
		os.Exit(1)
	}
	db := dynamodb.NewFromConfig(cfg)
	tables := shop.TablesFromEnv()
	svc, err := shop.NewService(db, tables, shop.WithOwner(shop.NewOwner(handler.FunctionName)), shop.WithLogger(log))
	if err != nil {
		log.Error("janitor: configuration", "error", err)
		os.Exit(1)
	}
	minAge := handler.DefaultMinAge
	if v := os.Getenv("SWEEP_MIN_AGE_SECONDS"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 0 {
			log.Error("janitor: SWEEP_MIN_AGE_SECONDS must be a number of seconds", "value", v)
			os.Exit(1)
		}
		minAge = time.Duration(secs) * time.Second
	}
	redriver := handler.SQSRedriver{Client: sqs.NewFromConfig(cfg), QueueURL: os.Getenv("ORDERS_QUEUE_URL")}
	h := handler.New(db, tables.Locks, svc, redriver, handler.WithLogger(log), handler.WithMinAge(minAge))
	lambda.Start(h.Handle)
}
