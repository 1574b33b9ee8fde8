//go:build race

package outbox

// raceEnabled makes slow exhaustive tests sample less under -race.
const raceEnabled = true
