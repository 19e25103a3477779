//go:build !race

package lockcore

// simDefaultSeeds is how many seeds `go test` runs in TestSim without the race detector
// (about 2000 in well under a minute).
const simDefaultSeeds = 2000
