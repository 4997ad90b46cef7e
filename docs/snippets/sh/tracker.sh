kmq tracker
