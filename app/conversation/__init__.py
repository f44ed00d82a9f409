"""The chat window's state without Qt: which conversation is open, its messages as shown, the
reply being streamed, the model it talks to and what the input may do now.

ui.chat.chat_controller wires these to the window's widgets and the engine bridge's
signals; everything it decides is here, tested as plain Python.
"""
