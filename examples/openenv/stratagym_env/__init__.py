"""A stratagym env packaged the way ``openenv init`` lays out an OpenEnv env (see openenv.yaml)."""
