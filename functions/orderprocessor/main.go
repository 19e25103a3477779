// Command orderprocessor is the OrderProcessorFunction Lambda (template.yaml): it reserves
// stock for the orders of the orders queue. The logic is in package handler.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

func main() {
	log := obs.Setup()
	cfg, err := obs.AWSConfig(context.Background())
	if err != nil {
		log.Error("orderprocessor: AWS configuration", "error", err)
		os.Exit(1)
	}
	svc, err := shop.NewService(dynamodb.NewFromConfig(cfg), shop.TablesFromEnv(),
		shop.WithOwner(shop.NewOwner(handler.FunctionName)), shop.WithLogger(log))
	if err != nil {
		log.Error("orderprocessor: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(handler.New(svc, handler.WithLogger(log)).HandleJSON)
}
