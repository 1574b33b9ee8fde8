package receipt

// RedriveHeader marks an origin event published again by the redrive; its
// value is the redrive count of the event in this process. An edge that
// receives an event with it publishes the event's receipt again even when
// it has published it before (a receipt lost on the way back).
const RedriveHeader = "Leafline-Redrive"
