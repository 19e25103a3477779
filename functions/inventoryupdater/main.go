// Command inventoryupdater is the InventoryUpdaterFunction Lambda (template.yaml): it
// applies StockAdjusted events to the inventory. The logic is in package handler.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

func main() {
	log := obs.Setup()
	cfg, err := obs.AWSConfig(context.Background())
	if err != nil {
		log.Error("inventoryupdater: AWS configuration", "error", err)
		os.Exit(1)
	}
	svc, err := shop.NewService(dynamodb.NewFromConfig(cfg), shop.TablesFromEnv(),
		shop.WithOwner(shop.NewOwner(handler.FunctionName)), shop.WithLogger(log))
	if err != nil {
		log.Error("inventoryupdater: configuration", "error", err)
		os.Exit(1)
	}
	lambda.Start(handler.New(svc, handler.WithLogger(log)).HandleJSON)
}
