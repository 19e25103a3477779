# Expand template.yaml through the SAM translator (as CloudFormation's transform does), with
# the local CodeUri replaced by an S3 location (as `sam package` would), for scanners that
# should see what is deployed (docs/security.md). Run from the repository root:
#   AWS_DEFAULT_REGION=us-east-1 .venv/bin/python docs/sam-expand.py
# writes .cache/security/template.cfn.json and prints each role and function.
import json
import os
out_path = '.cache/security/template.cfn.json'
os.makedirs(os.path.dirname(out_path), exist_ok=True)
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse
class NoManaged:
    def load(self): return {}
tpl = yaml_parse(open('template.yaml').read())
for r in tpl['Resources'].values():
    if r['Type'] == 'AWS::Serverless::Function':
        r['Properties']['CodeUri'] = 's3://example-bucket/bootstrap.zip'
out = transform(tpl, {}, NoManaged())
json.dump(out, open(out_path, 'w'), indent=1)
for k, v in sorted(out['Resources'].items()):
    p = v.get('Properties', {})
    if v['Type'] == 'AWS::IAM::Role':
        print(k, 'managed:', p.get('ManagedPolicyArns'), 'inline:', [x.get('PolicyName') for x in p.get('Policies', [])])
    if v['Type'] == 'AWS::Lambda::Function':
        print(k, p.get('Role'), p.get('LoggingConfig'), p.get('ReservedConcurrentExecutions'))
print(len(out['Resources']), 'resources')
