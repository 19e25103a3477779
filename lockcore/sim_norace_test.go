//go:build !race

package lockcore

// simDefaultSeeds is how many seeds `go test` runs in TestSim without the race detector
// (about a minute on two cores).
const simDefaultSeeds = 1500
