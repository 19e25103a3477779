package handler

// StreamImage converts a lock-table item to the stream's old-image form (tests).
var StreamImage = streamImage
