//go:build race

package lockcore

// simDefaultSeeds is how many seeds `go test -race` runs in TestSim: the race detector
// slows the simulator several times.
const simDefaultSeeds = 200
