// Command inventoryupdater is the InventoryUpdaterFunction Lambda (template.yaml): it
// applies StockAdjusted events to the inventory. The logic is in package handler.
package main

import (
	"github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	"github.com/turnstile-locks/turnstile/internal/fnmain"
)

func main() {
	fnmain.Run(handler.FunctionName, func(e fnmain.Env) (any, error) {
		return handler.New(e.Service, handler.WithLogger(e.Log)).HandleJSON, nil
	})
}
