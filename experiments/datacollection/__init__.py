"""CartPole data collection (paper "Optimizing Data Collection in Deep RL")."""
