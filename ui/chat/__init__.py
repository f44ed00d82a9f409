"""The chat in the main window: controllers that send a message, stream the reply, load a
model, show, list and export conversations. They drive the whole window, so they sit above
it; the widgets they drive are in ui.conversation and ui.window."""
